"""Single sign-on settings (scheduler_core/oidc_settings.py): each bad one is refused by its name."""

from __future__ import annotations

from pathlib import Path

import pytest

from scheduler_core.errors import ConfigError
from scheduler_core.oidc_settings import GroupRole, OidcSettings
from scheduler_core.settings import likely_typos, read_settings

GOOD = {"HAI_OIDC_ISSUER": "https://id.example.test/realms/x", "HAI_OIDC_CLIENT_ID": "dashboard",
        "HAI_OIDC_CLIENT_SECRET": "s3cret", "HAI_OIDC_GROUP_ROLES": "ops=default:operator, platform=*:admin"}


def _oidc(**env: str) -> OidcSettings:
    settings = read_settings(environ={"HAI_DATABASE_URL": "sqlite:///x.db", **GOOD, **env}).sign_on.oidc
    assert settings is not None
    return settings


def test_sign_on_is_off_without_an_issuer_and_local_accounts_stay() -> None:
    sign_on = read_settings(environ={"HAI_DATABASE_URL": "sqlite:///x.db"}).sign_on
    assert (sign_on.oidc, sign_on.local) == (None, True)


def test_the_settings_and_their_defaults() -> None:
    settings = _oidc()
    assert (settings.issuer, settings.client_id, settings.client_secret) == (
        "https://id.example.test/realms/x", "dashboard", "s3cret")
    assert settings.scopes == ("openid", "profile", "email", "groups")
    assert (settings.groups_claim, settings.username_claim, settings.refresh_s) == ("groups", "preferred_username", 60)
    assert settings.group_roles == (GroupRole("ops", "default", "operator"), GroupRole("platform", "*", "admin"))
    assert "s3cret" not in repr(settings)


def test_the_highest_role_the_groups_grant() -> None:
    settings = _oidc(HAI_OIDC_GROUP_ROLES="ops=default:operator\nplatform=*:admin\nreaders=default:viewer")
    assert settings.access_of(["readers", "ops", "unrelated"]).highest == "operator"
    assert settings.access_of(["platform", "readers"]).highest == "admin"
    assert settings.access_of("readers").highest == "viewer"  # a provider that sends one group as a string
    assert settings.access_of(["nobody"]).highest is None
    assert settings.access_of(None).highest is None
    assert settings.access_of({"ops": True}).highest is None  # not a list of names
    assert settings.access_of([["ops"], 7]).highest is None


def test_the_client_secret_by_reference_to_a_file(tmp_path: Path) -> None:
    secret = tmp_path / "secret"
    secret.write_text("from-a-file\n")
    environ = {**GOOD, "HAI_OIDC_CLIENT_SECRET_FILE": str(secret)}
    del environ["HAI_OIDC_CLIENT_SECRET"]
    settings = read_settings(environ={"HAI_DATABASE_URL": "sqlite:///x.db", **environ}).sign_on.oidc
    assert settings is not None and settings.client_secret == "from-a-file"


def test_local_accounts_can_be_turned_off_with_sign_on() -> None:
    sign_on = read_settings(environ={"HAI_DATABASE_URL": "sqlite:///x.db", **GOOD, "HAI_LOCAL_LOGIN": "off"}).sign_on
    assert sign_on.local is False


@pytest.mark.parametrize(("env", "field", "says"), [
    ({"HAI_OIDC_ISSUER": None, "HAI_OIDC_CLIENT_ID": "x"}, "HAI_OIDC_CLIENT_ID", "single sign-on is off"),
    ({"HAI_OIDC_ISSUER": None, "HAI_OIDC_CLIENT_ID": None, "HAI_OIDC_CLIENT_SECRET": None,
      "HAI_OIDC_GROUP_ROLES": None, "HAI_LOCAL_LOGIN": "off"}, "HAI_LOCAL_LOGIN", "nobody could sign in"),
    ({"HAI_LOCAL_LOGIN": "maybe"}, "HAI_LOCAL_LOGIN", "on or off"),
    ({"HAI_OIDC_ISSUER": "http://id.example.test", "HAI_ENV": "production", "HAI_E2E": "1"},
     "HAI_OIDC_ISSUER", "https:// outside development"),
    ({"HAI_OIDC_ISSUER": "ftp://id.example.test"}, "HAI_OIDC_ISSUER", "https://"),
    ({"HAI_OIDC_ISSUER": "id.example.test"}, "HAI_OIDC_ISSUER", "https://"),
    ({"HAI_OIDC_ISSUER": "https://id.example.test/?x=1"}, "HAI_OIDC_ISSUER", "no query"),
    ({"HAI_OIDC_ISSUER": "https://u:p@id.example.test"}, "HAI_OIDC_ISSUER", "credentials"),
    ({"HAI_OIDC_CLIENT_ID": None}, "HAI_OIDC_CLIENT_ID", "required"),
    ({"HAI_OIDC_CLIENT_SECRET": None}, "HAI_OIDC_CLIENT_SECRET_FILE", "required"),
    ({"HAI_OIDC_CLIENT_SECRET_FILE": "/nonexistent/secret"}, "HAI_OIDC_CLIENT_SECRET_FILE", "not both"),
    ({"HAI_OIDC_CLIENT_SECRET": None, "HAI_OIDC_CLIENT_SECRET_FILE": "/nonexistent/secret"},
     "HAI_OIDC_CLIENT_SECRET_FILE", "cannot read"),
    ({"HAI_OIDC_CLIENT_SECRET": "a\x01b"}, "HAI_OIDC_CLIENT_SECRET", "printable"),
    ({"HAI_OIDC_SCOPES": "profile email"}, "HAI_OIDC_SCOPES", "openid"),
    ({"HAI_OIDC_SCOPES": 'openid "quoted"'}, "HAI_OIDC_SCOPES", "scope names"),
    ({"HAI_OIDC_GROUPS_CLAIM": "groups claim"}, "HAI_OIDC_GROUPS_CLAIM", "claim name"),
    ({"HAI_OIDC_USERNAME_CLAIM": "9lives"}, "HAI_OIDC_USERNAME_CLAIM", "claim name"),
    ({"HAI_OIDC_GROUP_ROLES": None}, "HAI_OIDC_GROUP_ROLES", "required"),
    ({"HAI_OIDC_GROUP_ROLES": "ops"}, "HAI_OIDC_GROUP_ROLES", "not group=team:role"),
    ({"HAI_OIDC_GROUP_ROLES": "ops=operator"}, "HAI_OIDC_GROUP_ROLES", "not group=team:role"),
    ({"HAI_OIDC_GROUP_ROLES": "ops=Pay ments:operator"}, "HAI_OIDC_GROUP_ROLES", "not a team id"),
    ({"HAI_OIDC_GROUP_ROLES": "ops=default:root"}, "HAI_OIDC_GROUP_ROLES", "unknown role"),
    ({"HAI_OIDC_GROUP_ROLES": "ops=default:viewer,ops=default:admin"}, "HAI_OIDC_GROUP_ROLES", "mapped twice"),
    ({"HAI_OIDC_GROUP_ROLES": " , ,"}, "HAI_OIDC_GROUP_ROLES", "1..500"),
    ({"HAI_OIDC_REFRESH_S": "-1"}, "HAI_OIDC_REFRESH_S", ""),
    ({"HAI_OIDC_REFRESH_S": "3601"}, "HAI_OIDC_REFRESH_S", ""),
    ({"HAI_OIDC_REFRESH_S": "soon"}, "HAI_OIDC_REFRESH_S", ""),
])
def test_a_bad_sign_on_setting_is_refused_by_its_name(env: dict[str, str | None], field: str, says: str) -> None:
    environ = {"HAI_DATABASE_URL": "sqlite:///x.db", **GOOD}
    for name, value in env.items():
        if value is None:
            environ.pop(name, None)
        else:
            environ[name] = value
    with pytest.raises(ConfigError) as caught:
        read_settings(environ=environ)
    assert caught.value.field == field, caught.value
    assert says in caught.value.message


def test_a_misspelt_sign_on_setting_is_named() -> None:
    assert any("HAI_OIDC_ISSUER" in line for line in likely_typos({"HAI_OIDC_ISUER": "https://x"}))
