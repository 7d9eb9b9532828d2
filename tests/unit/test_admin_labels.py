"""Issue 31, item 15: the admin names each model as English does ("Resource classes", not "Resource classs";
"GPUs", not "Gpus")."""

import re

import pytest
from django.apps import apps

pytestmark = pytest.mark.django_db

#: A plural English does not make by adding "s": after s, x, z, ch, sh, or a consonant and y.
NOT_PLAIN_S = re.compile(r"(s|x|z|ch|sh|[^aeiou]y)$")


def test_no_model_is_named_in_the_plural_by_a_plain_s_where_english_does_not():
    wrong = {
        model.__name__: model._meta.verbose_name_plural
        for model in apps.get_models()
        if NOT_PLAIN_S.search(str(model._meta.verbose_name))
        and str(model._meta.verbose_name_plural) == f"{model._meta.verbose_name}s"
    }
    assert wrong == {}


def test_the_admin_index_names_the_portal_models_as_people_write_them(admin_client):
    page = admin_client.get("/admin/").content.decode()
    for name in ("Resource classes", "GPUs", "MIG partitions", "API tokens", "Service accounts", "Plan runs"):
        assert f">{name}<" in page, name
    for wrong in ("Resource classs", "Gpus", "Mig partitions", "Api tokens"):
        assert wrong not in page, wrong
