"""The carve pages in a real Chromium (ux-walk 2's smaller carve defects, issue 31): the form shows only the section
of the change picked; a preset fills the per-GPU fields in (read-only while it is picked); the slot drawing breaks
"1g.10gb" after "1g." and never inside "10gb"; an operation's Abort and Force controls each keep their label on one
line above a row of reason and button."""

import pytest

from gpus.models import Node, NodeConfigOperation
from gpus.nodeconfig import request_operation
from gpus.nodeconfig_plan import plan_mig

from .conftest import login

pytestmark = pytest.mark.browser
expect = pytest.importorskip("playwright.sync_api").expect

NODE = "gpu-a100-mig-01"  # 8x A100 80GB, mixed strategy, all-balanced: 1g.10gb at slots 0 and 1

#: The text after the last <wbr> of the first 1g.10gb cell's name, and how many lines it takes.
TAIL_LINES = """() => {
  const name = document.querySelector('[data-testid="current-partition"][data-profile="1g.10gb"] .mig-name');
  if (!name) return null;
  const range = document.createRange();
  range.selectNodeContents(name.lastChild);
  return [name.lastChild.textContent, range.getClientRects().length];
}"""


def test_the_carve_form_shows_what_is_picked_and_draws_profiles_whole(page, people, inventory, artifacts):
    login(page, "admin")
    page.goto(f"/nodes/{NODE}/configure/")
    mig, sharing = page.locator('fieldset[data-kind="mig"]'), page.locator('fieldset[data-kind="time-slicing"]')
    expect(mig).to_be_visible()
    expect(sharing).to_be_hidden()
    page.get_by_label("Sharing (time-slicing or MPS)").check()
    expect(sharing).to_be_visible()
    expect(mig).to_be_hidden()
    page.get_by_label("MIG layout").check()

    gpu0 = page.get_by_role("textbox", name="GPU 0", exact=True)
    expect(gpu0).to_have_value("1g.10gb@0, 1g.10gb@1, 2g.20gb@2, 3g.40gb@4")
    page.get_by_label("Preset for every GPU").select_option("all-3g.40gb")
    for index in (0, 7):
        box = page.get_by_role("textbox", name=f"GPU {index}", exact=True)
        expect(box).to_have_value("3g.40gb@0, 3g.40gb@4")
        expect(box).not_to_be_editable()
    page.get_by_label("Preset for every GPU").select_option("")
    expect(gpu0).to_be_editable()
    expect(gpu0).to_have_value("3g.40gb@0, 3g.40gb@4")  # the last preset is where a custom layout starts

    assert page.evaluate(TAIL_LINES) == ["10gb", 1]
    page.screenshot(path=str(artifacts / "carve-form.png"), full_page=True)


def test_abort_and_force_keep_their_labels_on_one_line(page, people, inventory, artifacts):
    node = Node.objects.get(name=NODE)
    op = request_operation(people["admin"], node, plan_mig(node, preset="all-3g.40gb"))
    NodeConfigOperation.objects.filter(pk=op.pk).update(state="draining")  # as the drain step leaves it
    login(page, "admin")
    page.goto(op.get_absolute_url())
    for form in ("abort-form", "force-form"):
        control = page.get_by_test_id(form)
        label = control.locator("label")
        lines = label.evaluate("(el) => el.getClientRects().length")
        assert lines == 1, f"{form}: its label takes {lines} lines"
        field, button = control.locator("input[name=reason]").bounding_box(), control.locator("button").bounding_box()
        label_box = label.bounding_box()
        assert label_box["y"] + label_box["height"] <= field["y"]  # the label sits above the reason
        assert abs((field["y"] + field["height"] / 2) - (button["y"] + button["height"] / 2)) < 4  # one row
    expect(page.get_by_test_id("force-form")).to_contain_text("services with a replica there")
    page.screenshot(path=str(artifacts / "carve-operation-controls.png"), full_page=True)
