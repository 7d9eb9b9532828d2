"""Issue 31, item 15 (ux-walk 2 #7): the key a YAML spec, the API and the command line name a resource class by
(``nvidia.com/gpu@NVIDIA-A10-SHARED``) is shown where a user looks: on the classes page, and beside the class
picked on the job, service and notebook forms. A hidden class's key is shown to admins only."""

from __future__ import annotations

import re

import pytest

from gpus.models import ResourceClass
from jobs import actions

KEY_ON_CLASS_PAGE = re.compile(r'data-testid="rc-key"[^>]*>([^<]+)<')
KEY_ON_FORM = re.compile(
    r'data-testid="class-key" data-caveat-for="(\d+)"[^>]*>.*?<code>resource_class: ([^<]+)</code>'
)


@pytest.fixture
def quotas(inventory, people):
    """vision has quota for every class; one class is hidden (admins only)."""
    classes = list(ResourceClass.objects.order_by("key"))
    for rc in classes:
        actions.set_quota(people["admin"], people["vision"], rc, 1, 2)
    classes[0].hidden = True
    classes[0].save(update_fields=["hidden"])
    return classes


def test_the_classes_page_shows_every_visible_class_key(client, people, quotas):
    client.force_login(people["alice"])
    shown = KEY_ON_CLASS_PAGE.findall(client.get("/resource-classes/").content.decode())
    assert sorted(shown) == sorted(rc.key for rc in quotas if not rc.hidden)
    client.force_login(people["admin"])
    shown = KEY_ON_CLASS_PAGE.findall(client.get("/resource-classes/").content.decode())
    assert sorted(shown) == sorted(rc.key for rc in quotas)


@pytest.mark.parametrize("path", ["/jobs/new/", "/services/new/", "/notebooks/"])
def test_each_form_shows_the_key_of_each_class_it_offers_beside_it(client, people, quotas, path):
    client.force_login(people["alice"])
    page = client.get(path).content.decode()
    offered = dict(KEY_ON_FORM.findall(page))
    visible = [rc for rc in quotas if not rc.hidden and rc.present]
    assert offered == {str(rc.pk): rc.key for rc in visible}, offered
    # The option the key belongs to is the class's own: the page script shows the picked class's key only.
    for rc in visible:
        assert f'value="{rc.pk}"' in page
