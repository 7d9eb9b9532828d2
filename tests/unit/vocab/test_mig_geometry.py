"""MIG geometry against the hardware's rules: the validator on hand-picked layouts with known answers, property
tests against the placement tables, and every layout of the GPU Operator's default mig-parted config."""

from __future__ import annotations

from collections import Counter

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.realdata import real_text
from vocab.mig import (
    CATALOGUE,
    advertised_after,
    custom_entries,
    geometry_for_device,
    parse_mig_parted,
    parse_slots,
    place,
    preset_layouts,
    product_geometry,
    render_mig_parted,
    validate_placements,
)

A100 = product_geometry("NVIDIA-A100-SXM4-40GB")
A30 = product_geometry("NVIDIA-A30")


@pytest.mark.parametrize(
    ("geometry", "layout", "words"),
    [
        (A100, [("4g.20gb", 0), ("3g.20gb", 4)], None),
        (A100, [("1g.5gb", s) for s in range(7)], None),
        (A100, [("3g.20gb", 0), ("3g.20gb", 4)], None),
        (A100, [("2g.10gb", 0), ("2g.10gb", 2), ("2g.10gb", 4), ("1g.5gb", 6)], None),
        (A100, [("7g.40gb", 0)], None),
        (A100, [("3g.20gb", 0), ("3g.20gb", 4), ("1g.5gb", 6)], "overlaps"),
        (A100, [("3g.20gb", 2)], "may start at 0, 4"),
        (A100, [("1g.5gb", 7)], "may start at 0, 1, 2, 3, 4, 5, 6"),
        (A100, [("1g.5gb+me", 0), ("1g.5gb+me", 1)], "Only one instance may take the media extensions"),
        (A100, [("4g.20gb", 0), ("4g.20gb", 4)], "may start at 0"),
        (A100, [("1g.10gb", 0), ("1g.10gb", 2), ("1g.10gb", 4), ("1g.10gb", 6)], None),
        (A100, [("1g.10gb", 0), ("1g.5gb", 1)], "overlaps 1g.10gb at slot 0 on memory slice 1"),
        (A100, [("3g.40gb", 0)], "has no MIG profile 3g.40gb"),
        (A30, [("1g.6gb", s) for s in range(4)], None),
        (A30, [("2g.12gb", 0), ("2g.12gb", 2)], None),
        (A30, [("4g.24gb", 0), ("1g.6gb", 3)], "overlaps"),
        (A30, [("2g.12gb", 0), ("1g.6gb", 2), ("1g.6gb", 3)], None),
    ],
)
def test_known_layouts(geometry, layout, words):
    errors = validate_placements(geometry, layout)
    if words is None:
        assert errors == []
        assert place(geometry, dict(Counter(name for name, _ in layout))) is not None
    else:
        assert any(words in e for e in errors), errors


def test_a30_compute_budget_is_four():
    # 2g + 2g uses all four compute slices; the table lets nothing else in.
    assert validate_placements(A30, [("2g.12gb", 0), ("2g.12gb", 2)]) == []
    assert place(A30, {"2g.12gb": 2, "1g.6gb": 1}) is None


def _placements(geometry):
    """Random instances: any profile of the GPU at any slot 0..8 (valid or not)."""
    names = [p.name for p in geometry.profiles]
    return st.lists(st.tuples(st.sampled_from(names), st.integers(0, geometry.memory_slices)), max_size=9)


def _table_says(geometry, layout) -> bool:
    """Acceptance straight from the placement tables: allowed starts, slices in range and unshared, counts,
    compute budget, one +me."""
    taken: set[int] = set()
    for name, start in layout:
        profile = geometry.profile(name)
        if start not in profile.starts:
            return False
        span = set(range(start, start + profile.size))
        if max(span) >= geometry.memory_slices or span & taken:
            return False
        taken |= span
    counts = Counter(name for name, _ in layout)
    if any(n > geometry.profile(name).max_instances for name, n in counts.items()):
        return False
    if sum(geometry.profile(name).compute for name, _ in layout) > geometry.compute_slices:
        return False
    return sum(1 for name, _ in layout if name.endswith("+me")) <= 1


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_validator_agrees_with_the_placement_tables(data):
    geometry = data.draw(st.sampled_from(CATALOGUE))
    layout = data.draw(_placements(geometry))
    assert (validate_placements(geometry, layout) == []) == _table_says(geometry, layout)


@settings(max_examples=300, deadline=None)
@given(data=st.data())
def test_any_valid_layout_can_be_placed_and_placements_are_valid(data):
    geometry = data.draw(st.sampled_from(CATALOGUE))
    layout = data.draw(_placements(geometry))
    counts = dict(Counter(name for name, _ in layout))
    found = place(geometry, counts)
    if validate_placements(geometry, layout) == []:
        assert found is not None, f"{geometry.key}: {layout} is valid but place() found nothing for {counts}"
    if found is not None:
        assert validate_placements(geometry, [(p.profile, p.start) for p in found]) == []
        assert Counter(p.profile for p in found) == Counter(counts)


def test_every_layout_of_the_gpu_operator_default_config_validates_for_its_devices():
    configmap = yaml.safe_load(real_text("05"))
    configs = parse_mig_parted(configmap["data"]["config.yaml"])
    checked: set[tuple[str, str]] = set()
    for name, entries in configs.items():
        for entry in entries:
            if not entry["enabled"] or not entry["mig_devices"]:
                continue
            if entry["device_filter"]:
                geometries = {geometry_for_device(d) for d in entry["device_filter"]} - {None}
            else:  # devices: all, no filter: meant for the products whose profiles these are
                geometries = {g for g in CATALOGUE if all(g.profile(p) for p in entry["mig_devices"])}
            for geometry in geometries:
                assert place(geometry, entry["mig_devices"]) is not None, (name, geometry.key, entry)
                checked.add((name, geometry.key))
    covered = {key for _, key in checked}
    assert covered == {g.key for g in CATALOGUE}, covered
    assert ("all-balanced", "A30-24GB") in checked and ("all-balanced", "H200-141GB") in checked
    assert len(checked) >= 40, len(checked)


def test_malformed_mig_parted_configs_are_refused():
    with pytest.raises(ValueError, match="version: v1"):
        parse_mig_parted("mig-configs: {}")
    with pytest.raises(ValueError, match="needs 'devices' and 'mig-enabled'"):
        parse_mig_parted("version: v1\nmig-configs:\n  x:\n    - mig-devices: {}\n")
    with pytest.raises(ValueError, match="must map profile names to counts"):
        parse_mig_parted(
            "version: v1\nmig-configs:\n  x:\n    - devices: all\n      mig-enabled: true\n"
            "      mig-devices: {'1g.5gb': many}\n"
        )


def test_presets_are_the_gpu_operator_default_configs_for_every_catalogued_product():
    """preset_layouts() is what the operator's default mig-parted config says for each device id, name by name,
    so a preset the portal writes into its own ConfigMap applies the same layout the operator would."""
    configmap = yaml.safe_load(real_text("05"))
    configs = parse_mig_parted(configmap["data"]["config.yaml"])
    compared = 0
    for geometry in CATALOGUE:
        presets = preset_layouts(geometry)
        for name, layout in presets.items():
            entries = configs.get(name)
            assert entries, f"{name} is not a GPU Operator preset"
            matching = [
                e
                for e in entries
                if e["device_filter"] is None or set(e["device_filter"]) & set(geometry.pci_device_ids)
            ]
            assert matching, (geometry.key, name)
            expected = None if not matching[-1]["enabled"] else matching[-1]["mig_devices"]
            if expected is not None and matching[-1]["device_filter"] is None and layout:
                # A filterless entry is meant for the products whose profile names it uses.
                if not all(geometry.profile(p) for p in expected):
                    continue
            assert layout == expected, (geometry.key, name, layout, expected)
            compared += 1
    assert compared >= 50, compared


@settings(max_examples=200, deadline=None)
@given(data=st.data())
def test_a_typed_layout_round_trips_through_parse_slots(data):
    geometry = data.draw(st.sampled_from(CATALOGUE))
    layout = data.draw(_placements(geometry))
    text = ", ".join(f"{name}@{start}" for name, start in layout)
    placements, errors = parse_slots(geometry, text)
    assert errors == [] and sorted(placements) == sorted(layout)
    # Without slots, what parse_slots places is always valid (or it says the instances do not fit).
    bare = ", ".join(name for name, _ in layout)
    placed, problems = parse_slots(geometry, bare)
    if not problems:
        assert Counter(n for n, _ in placed) == Counter(n for n, _ in layout)
        assert all(s in geometry.profile(n).starts for n, s in placed)


def test_single_strategy_needs_one_profile_everywhere():
    a100 = product_geometry("NVIDIA-A100-SXM4-40GB")
    resources, label, problems = advertised_after(a100, [{"1g.5gb": 7}] * 4, "single", "NVIDIA-A100-SXM4-40GB")
    assert resources == {"nvidia.com/gpu": 28} and label == "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb" and not problems
    resources, label, problems = advertised_after(
        a100, [{"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}] * 4, "single", "NVIDIA-A100-SXM4-40GB-MIG-1g.5gb"
    )
    assert resources == {} and label.endswith("-MIG-INVALID") and "single MIG strategy" in problems[0]
    resources, _, _ = advertised_after(a100, [{"3g.20gb": 2}, None], "mixed", "NVIDIA-A100-SXM4-40GB")
    assert resources == {"nvidia.com/gpu": 1, "nvidia.com/mig-3g.20gb": 2}


def test_custom_entries_group_gpus_with_the_same_layout():
    entries = custom_entries([{"1g.5gb": 7}, None, {"1g.5gb": 7}, {"3g.20gb": 2}])
    assert entries == [
        {"devices": [0, 2], "mig-enabled": True, "mig-devices": {"1g.5gb": 7}},
        {"devices": [1], "mig-enabled": False},
        {"devices": [3], "mig-enabled": True, "mig-devices": {"3g.20gb": 2}},
    ]
    parsed = parse_mig_parted(render_mig_parted({"custom-node": entries}))
    assert [e["devices"] for e in parsed["custom-node"]] == [[0, 2], [1], [3]]


@pytest.mark.parametrize(
    "text",
    [
        "10000000x1g.5gb",
        "8x1g.5gb",
        "1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb, 1g.5gb",
        "5x1g.5gb, 5x2g.10gb",
        "99999999999999999999x1g.5gb@0",
        "1g.5gb@99999999999999999999",
    ],
)
def test_a_huge_layout_is_refused_before_any_search_naming_the_maximum(monkeypatch, text):
    """Audit finding 9: counts are bounded by the GPU's slices before the placement search runs."""
    import vocab.mig as mig_module

    real = mig_module._backtrack

    def bounded(geometry, wanted, taken):
        assert len(wanted) <= geometry.memory_slices, f"searched {len(wanted)} instances"
        return real(geometry, wanted, taken)

    monkeypatch.setattr(mig_module, "_backtrack", bounded)
    placements, errors = parse_slots(A100, text)
    assert errors, placements
    assert len(placements) <= A100.memory_slices
    assert any("at most" in e.lower() or "0-7" in e for e in errors), errors


@pytest.mark.parametrize("text", ["\u00b2x1g.5gb", "1g.5gb@\u00b2", "\u0663x1g.5gb", "1g.5gb@\uff11"])
def test_unicode_digits_in_a_layout_are_an_error_not_a_crash(text):
    placements, errors = parse_slots(A100, text)
    assert errors and not placements


def test_a_layout_longer_than_any_real_one_is_refused():
    placements, errors = parse_slots(A100, ", ".join(["1g.5gb"] * 5000))
    assert errors and not placements
