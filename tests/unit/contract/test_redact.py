"""launcher/contract/redact.py: secret values scrubbed from free text and argv."""

from __future__ import annotations

from launcher.contract.redact import Scrubber, secret_values


def test_scrubber_hides_secret_values_in_text() -> None:
    env = {
        "HF_TOKEN": "hf_abcdefgh",
        "MY_API_KEY": "k-12345678",
        "SHORT_TOKEN": "abc",  # too short to be a credential: hiding it would garble every log
        "TOKENIZERS_PARALLELISM": "false",
        "MAX_TOKENS": "1000000000",
        "HOME": "/root/home",
    }
    scrub = Scrubber(secret_values(env))
    assert scrub("token hf_abcdefgh key k-12345678 home /root/home abc false 1000000000") == (
        "token <redacted> key <redacted> home /root/home abc false 1000000000"
    )
    assert Scrubber([])("unchanged") == "unchanged"


def test_redacted_argv_never_swallows_the_next_flag() -> None:
    from launcher.contract.redact import redact_argv

    argv = ["vllm", "--allow-credentials", "--port", "8000", "--api-key", "sk-1", "--hf-token", "--x"]
    assert redact_argv(argv) == [
        "vllm", "--allow-credentials", "--port", "8000", "--api-key", "<redacted>", "--hf-token", "--x",
    ]  # fmt: skip
