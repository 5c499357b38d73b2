"""Where a recipe comes from: a module of its own, so the file reader (recipe_file.py) and the YAML
parser (recipe_yaml.py) both name it without importing each other."""

from launcher.contract.record import record


@record
class RecipeSource:
    """Where a recipe comes from, and the setting a person changes to fix it."""

    name: str
    file: str | None

    @property
    def setting(self) -> str:
        return "LLMD_RECIPE" if self.file is None else "LLMD_RECIPE_FILE"

    @property
    def label(self) -> str:
        """For messages: a path with a newline in it would break the one-line-per-problem rule."""
        if self.file is None:
            return (
                f"built-in recipe {self.name!r}"
                if not self.name.isprintable()
                else f"built-in recipe {self.name}"
            )
        return self.file if self.file.isprintable() and self.file else repr(self.file)
