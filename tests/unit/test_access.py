"""A user's access (scheduler_core/access.py): the global role and the role in each team; a
team's role is the higher of the two, and a scope is every team or a set of them."""

from __future__ import annotations

from scheduler_core.access import Access, higher, rank
from scheduler_core.oidc_settings import GroupRole, OidcSettings


def test_the_role_in_a_team_is_the_higher_of_the_global_role_and_the_grant() -> None:
    access = Access.of("viewer", {"payments": "operator", "web": "viewer"})
    assert (access.role_in("payments"), access.role_in("web"), access.role_in("other")) == (
        "operator", "viewer", "viewer")
    assert access.highest == "operator"
    assert access.can("operator") and access.can("operator", "payments")
    assert not access.can("operator", "web") and not access.can("admin")


def test_a_scope_is_every_team_for_a_global_role_high_enough_else_the_teams_granting_it() -> None:
    access = Access.of("viewer", {"payments": "admin", "web": "operator"})
    assert access.teams("viewer") is None
    assert access.teams("operator") == frozenset({"payments", "web"})
    assert access.teams("admin") == frozenset({"payments"})
    assert Access.of(None, {}).teams() == frozenset()


def test_no_role_at_all() -> None:
    for access in (Access.of(None, {}), Access.of("root", {"x": "superuser"})):
        assert access.nothing and access.highest is None and not access.can("viewer")
    assert Access.of(None, {"x": "viewer"}) == Access.of(None, [("x", "viewer")])  # grants compare as a set
    assert (rank(None), rank("viewer"), rank("admin"), higher(None, "viewer", "operator")) == (-1, 0, 2, "operator")


def test_groups_grant_a_global_role_through_star_and_team_roles_through_their_team() -> None:
    settings = OidcSettings(issuer="https://id.test", client_id="c", client_secret="s", group_roles=(
        GroupRole("platform", "*", "admin"), GroupRole("ops", "default", "operator"),
        GroupRole("readers", "default", "viewer"), GroupRole("auditors", "*", "viewer")))
    assert settings.access_of(["ops", "readers"]) == Access.of(None, {"default": "operator"})
    assert settings.access_of(["auditors", "ops"]) == Access.of("viewer", {"default": "operator"})
    assert settings.access_of(["platform"]).teams("admin") is None
    assert settings.access_of(["nobody"]).nothing
