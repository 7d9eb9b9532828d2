"""The demo's sign-in list says what each person is (ux-walk-2: it printed "alice (member)" for the lead of
Computer Vision)."""

import pytest

from accounts.demo import seed_people

pytestmark = pytest.mark.django_db


def test_the_sign_in_list_names_each_persons_teams_and_roles(tmp_path):
    standings = {c.username: c.standing for c in seed_people(tmp_path / "creds.txt")}
    assert standings == {
        "admin": "admin; lead of ML Platform",
        "alice": "lead of Computer Vision",
        "bob": "member of Language Models and Computer Vision",
    }
