"""Session reads name the parent and root of a sub-agent without joining every row to them:
``v1.session.list`` and ``v1.session.get`` carry the right lineage fields, a page of root
sessions costs one query, and a page of sub-agents at most one more for their lineage."""

from __future__ import annotations

from typing import Any

import pytest

from tests.sessions.factories import call, make_session

pytestmark = [pytest.mark.django_db]


def _tree(user: Any) -> tuple[Any, Any, Any]:
    root = make_session(user, client_session_id="cs-root")
    child = make_session(user, client_session_id="cs-child", parent_session=root,
                         root_session=root)
    grandchild = make_session(user, client_session_id="cs-grand", parent_session=child,
                              root_session=root)
    return root, child, grandchild


def _lineage(item: dict[str, Any]) -> tuple[str, str, str, str]:
    return (item["parent_client_session_id"], item["parent_server_session_id"],
            item["root_client_session_id"], item["root_server_session_id"])


def test_root_sessions_are_listed_in_one_query_with_empty_lineage(
        make_user: Any, django_assert_num_queries: Any) -> None:
    user = make_user()
    _tree(user)
    make_session(user, client_session_id="cs-other")
    with django_assert_num_queries(1):
        page = call("v1.session.list", user)
    assert sorted(i["client_id"] for i in page["items"]) == ["cs-other", "cs-root"]
    assert all(_lineage(i) == ("", "", "", "") for i in page["items"])


def test_sub_agents_carry_their_parent_and_root(
        make_user: Any, django_assert_max_num_queries: Any) -> None:
    user = make_user()
    root, child, grandchild = _tree(user)

    with django_assert_max_num_queries(2):  # the parent, then the page: the root is the parent
        children = call("v1.session.list", user, {"parent_session_id": str(root.id)})
    assert [_lineage(i) for i in children["items"]] == [
        ("cs-root", str(root.id), "cs-root", str(root.id))]

    with django_assert_max_num_queries(3):  # ... and one for the root
        grandchildren = call("v1.session.list", user, {"parent_session_id": str(child.id)})
    assert [_lineage(i) for i in grandchildren["items"]] == [
        ("cs-child", str(child.id), "cs-root", str(root.id))]

    got = call("v1.session.get", user, {"session_id": str(grandchild.id)})["item"]
    assert _lineage(got) == ("cs-child", str(child.id), "cs-root", str(root.id))
    assert _lineage(call("v1.session.get", user, {"session_id": str(root.id)})["item"]) == (
        "", "", "", "")


def test_a_deleted_parent_still_names_itself_in_its_childrens_lineage(make_user: Any) -> None:
    user = make_user()
    root, child, _ = _tree(user)
    call("v1.session.update", user, {"session_id": str(root.id),
                                     "deleted_at": "2026-01-01T00:00:00Z"})
    got = call("v1.session.get", user, {"session_id": str(child.id)})["item"]
    assert _lineage(got) == ("cs-root", str(root.id), "cs-root", str(root.id))
