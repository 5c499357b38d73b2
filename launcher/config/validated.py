"""A recipe the schema validated, as JSON data and back without validating it again: the form the
built-in recipes ship in (recipes/validated/NAME.json, scripts/compile_recipes.py), so a dry-run does
not build the schema's validator (~4 ms) to check what was checked when the package was built.

Each model becomes {"$model": class name, "fields": its validated values, "given": the fields the
recipe set}, and comes back through pydantic's `model_construct`, documented for "trusted or
pre-validated data": the same class, values and fields set, so an equal model. Only the package's
own files are read this way; a recipe file is always validated.
"""

from typing import Any

from pydantic import BaseModel

from launcher.config import recipe

_MODEL = "$model"
# The recipe schema's models by name: what a "$model" may name.
_MODELS = {
    name: cls
    for name, cls in vars(recipe).items()
    if isinstance(cls, type) and issubclass(cls, BaseModel) and cls.__module__ == recipe.__name__
}


def dump_validated(value: Any) -> Any:
    """A validated recipe (or any value in it) as JSON data."""
    if isinstance(value, BaseModel):
        if _MODELS.get(type(value).__name__) is not type(value):
            raise TypeError(f"{type(value).__name__} is not a recipe model")
        return {
            _MODEL: type(value).__name__,
            "fields": {name: dump_validated(getattr(value, name)) for name in type(value).model_fields},
            "given": sorted(value.model_fields_set),
        }
    if isinstance(value, dict):
        if _MODEL in value:
            raise ValueError(f"a mapping with a {_MODEL!r} key would read back as a model")
        return {key: dump_validated(item) for key, item in value.items()}
    if isinstance(value, list):
        return [dump_validated(item) for item in value]
    if value is None or isinstance(value, (str, bool, int, float)):
        return value
    raise TypeError(f"{type(value).__name__} has no JSON form that reads back as itself")


def load_validated(data: Any) -> Any:
    """What dump_validated wrote, as the models it was written from."""
    if isinstance(data, dict):
        if _MODEL in data:
            values = {name: load_validated(item) for name, item in data["fields"].items()}
            return _MODELS[data[_MODEL]].model_construct(set(data["given"]), **values)
        return {key: load_validated(item) for key, item in data.items()}
    if isinstance(data, list):
        return [load_validated(item) for item in data]
    return data
