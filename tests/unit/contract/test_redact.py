"""launcher/contract/redact.py: secret values scrubbed from free text and argv."""

from __future__ import annotations

import pytest

from launcher.contract.redact import Scrubber, is_secret_flag, secret_values


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


@pytest.mark.parametrize(
    ("flag", "secret"),
    [
        ("--api-key", True),
        ("--hf-token", True),
        ("--aws-secret-access-key", True),
        ("--apikey", True),
        ("-api-key", True),
        ("--HF_Token.x=v", True),
        ("--hf-tok", True),  # argparse expands an abbreviation: two letters or more of a secret word
        ("--api-ke", True),
        ("--db-passw", True),
        ("--hf-to", True),
        ("--hf-t", False),  # one letter is no word
        ("--long-prefill-token-threshold", False),
        ("--return-tokens-as-token-ids", False),
        ("--allow-credentials", False),
        ("--keys", False),
        ("--port", False),
    ],
)
def test_a_flag_is_secret_when_its_last_word_is_or_begins_a_secret_word(flag: str, secret: bool) -> None:
    assert is_secret_flag(flag) is secret
