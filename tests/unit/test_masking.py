"""Secrets are masked wherever a definition is shown or logged."""

from __future__ import annotations

from scheduler_core import TaskDefinition
from scheduler_core.masking import mask_url, mask_values, masked_handler


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
