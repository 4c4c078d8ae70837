"""Secrets are masked wherever a definition is shown or logged."""

from __future__ import annotations

import pytest

from scheduler_core import TaskDefinition
from scheduler_core.masking import is_secret_name, mask_headers, mask_text, mask_url, mask_values, masked_handler


def test_handler_headers_and_url_credentials_are_masked() -> None:
    handler = {"kind": "api", "url": "https://svc:hunter2@api.example/run?x=1",
               "headers": {"Authorization": "Bearer abc", "X-Api-Key": "k1", "Cookie": "s=1", "Accept": "json"}}
    shown = masked_handler(handler)
    assert shown == {"kind": "api", "url": "https://svc:***@api.example/run?x=1",
                     "headers": {"Authorization": "***", "X-Api-Key": "***", "Cookie": "***", "Accept": "json"}}
    assert handler["headers"]["Authorization"] == "Bearer abc"  # the original is untouched


def test_params_and_repr_never_show_secrets() -> None:
    task = TaskDefinition(id="t", name="T", cron="* * * * *", params={"token": "t0p", "nested": {"password": "p"},
                                                                    "channel": "ops"},
                          handler={"kind": "api", "url": "https://h/x", "headers": {"X-Session-Id": "zzz"}})
    text = repr(task)
    for secret in ("t0p", "zzz", "'p'"):
        assert secret not in text
    assert "ops" in text and "https://h/x" in text
    assert mask_values([{"secret": 1}, "plain"]) == [{"secret": "***"}, "plain"]
    assert mask_url("https://h/x") == "https://h/x" and mask_url("not a url") == "not a url"


def test_webhook_tokens_in_paths_and_secret_query_values_are_masked() -> None:
    slack = "https://hooks.slack.com/services/T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX1a"
    assert mask_url(slack) == "https://hooks.slack.com/services/T00000000/B00000000/***"
    discord = "https://discord.com/api/webhooks/123456789012345678/AbCdEf0123456789_token-part"
    assert mask_url(discord) == "https://discord.com/api/webhooks/123456789012345678/***"
    assert mask_url("https://api.example/v1/send?access_token=s3cr3t&to=ops#top") == (
        "https://api.example/v1/send?access_token=***&to=ops#top")
    assert mask_url("https://api.example/v1/reports/daily") == "https://api.example/v1/reports/daily"


# One name per family of secret-looking names (scheduler_core.masking._SECRET_NAME), chosen so that
# no other family matches it: dropping any one family from the pattern fails this test. The one
# exception is "authorization", which "auth" always matches too (its own name, the Authorization
# header, is still checked).
FAMILIES = ("authorization", "cookie", "key", "token", "secret", "passw", "auth", "session", "credential")
ONLY_NAMES = {"cookie": "Set-Cookie", "key": "api_key", "token": "X-Access-Token", "secret": "client_secret",
              "passw": "DB_PASSWD", "auth": "X-Auth", "session": "sessionid", "credential": "gcp_credentials"}


@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_of_secret_names_is_masked(family: str) -> None:
    name = ONLY_NAMES.get(family, "Authorization")
    others = [f for f in FAMILIES if f != family and f in name.lower()]
    assert others == ([] if family != "authorization" else ["auth"])  # the name tests this family alone
    assert is_secret_name(name) and is_secret_name(name.upper())
    assert mask_values({name: "s3cr3t", "nested": [{name: 7}]}) == {name: "***", "nested": [{name: "***"}]}
    assert mask_headers({name: "s3cr3t", "Accept": "json"}) == {name: "***", "Accept": "json"}
    assert mask_url(f"https://api.example/send?{name}=s3cr3t&to=ops") == (
        f"https://api.example/send?{name}=***&to=ops")


def test_names_of_no_family_are_shown() -> None:
    for name in ("Accept", "channel", "user", "url", "Content-Type", "attempts"):
        assert not is_secret_name(name)
    assert mask_headers({"Accept": "json"}) == {"Accept": "json"}


def test_token_like_path_segments_start_at_sixteen_characters_of_letters_and_digits() -> None:
    assert mask_url("https://h/hooks/abcdefghijklmno1") == "https://h/hooks/***"  # 16
    assert mask_url("https://h/hooks/abcdefghijklmn1") == "https://h/hooks/abcdefghijklmn1"  # 15
    assert mask_url("https://h/hooks/abcdefghijklmnop") == "https://h/hooks/abcdefghijklmnop"  # no digit
    assert mask_url("https://h/hooks/1234567890123456") == "https://h/hooks/1234567890123456"  # no letter


def test_urls_are_masked_only_where_they_carry_a_credential() -> None:
    assert mask_url("https://user@api.example/x") == "https://user@api.example/x"  # a user, no password
    assert mask_url("https://api.example:8443/x") == "https://api.example:8443/x"  # a port is no password
    assert mask_url("https://user:pw@api.example:8443/x") == "https://user:***@api.example:8443/x"
    # No host, or no scheme: not a URL to mask, whatever its path looks like.
    assert mask_url("file:///srv/abcdefghijklmno1") == "file:///srv/abcdefghijklmno1"
    assert mask_url("//api.example/abcdefghijklmno1") == "//api.example/abcdefghijklmno1"
    assert mask_url("https://[::1/abcdefghijklmno1") == "https://[::1/abcdefghijklmno1"  # urlsplit refuses it
    assert mask_url("https://api.example/x?flag&token=t") == "https://api.example/x?flag&token=***"
    assert mask_url("https://api.example/x?token&to=ops") == "https://api.example/x?token&to=ops"  # no value


def test_values_other_than_text_and_containers_pass_through() -> None:
    value = {"n": 5, "ok": True, "none": None, "f": 1.5, "list": [1, "https://u:p@h/x"], "tuple": ("a", 2)}
    assert mask_values(value) == {"n": 5, "ok": True, "none": None, "f": 1.5, "list": [1, "https://u:***@h/x"],
                                  "tuple": ["a", 2]}
    assert masked_handler(None) is None


def test_masking_a_long_run_of_name_characters_is_linear() -> None:
    """A result or error text is untrusted: 256 KiB without a separator took hours when each pattern
    scanned the rest of the run from every position (16 KiB: 15 s); bounded names make it linear
    (about 2 s here). A separate process with a generous deadline catches the quadratic form."""
    import subprocess
    import sys

    script = ("from scheduler_core.masking import mask_text\n"
              "for text in ('a' * 262144, 'a1' * 131072, 'x' * 262144 + '://'):\n"
              "    assert mask_text(text) == text\n")
    subprocess.run([sys.executable, "-c", script], check=True, timeout=120)


def test_bounded_names_still_mask_what_they_did() -> None:
    assert mask_text("--password=s3cret") == "--password=***"
    assert mask_text("x" * 100 + "_api_token=abc") == "x" * 100 + "_api_token=***"
    assert mask_text("prefix" * 10 + "https://u:pw@h/x") == "prefix" * 10 + "https://u:***@h/x"
