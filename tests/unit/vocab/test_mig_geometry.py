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
    STALE_PRESET_PROFILES,
    advertised_after,
    custom_entries,
    geometry_for_device,
    layout_problems,
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
    return sum(1 for name, _ in layout if "+me" in name) <= 1  # +me and +me.all share the one media set


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


# -- issue 31 item 17: every MIG-capable GPU of NVIDIA's current configuration ----------------------------------

#: Per device-ID group of the GPU Operator's default mig-parted config, every profile and how many fit one GPU, as
#: extracted by hand from NVIDIA's own sources (not from vocab.mig):
#: - NVIDIA/gpu-operator assets/state-mig-manager/0400_configmap.yaml @ db0bb63ec5346a187a73273a0a97bc71ee9f1f3b
#:   (fixture 05; the same at the repository head a22dbf67): the device-filter groups and the all-<profile> counts;
#: - NVIDIA/mig-parted pkg/mig/builder/builder_test.go @ bd7160f43f16462eeb21e1eda5e67b5b6b03fd7d (MaxCount per
#:   profile after the MIG User Guide) for profiles without an all-<profile> entry of their own;
#: - nvidia-smi mig -lgip of B200 (NVIDIA/mig-parted#166), GB200 (NVIDIA/mig-parted#227), H200
#:   (NVIDIA/mig-parted#120), GH200 144G (NVIDIA/mig-parted#139), RTX PRO 6000 (bigstack-oss/cubecos#312).
NVIDIA_PROFILE_COUNTS = {
    ("0x20B010DE", "0x20B110DE", "0x20F110DE", "0x20F610DE"): {  # A100-40GB, A800-40GB
        "1g.5gb": 7, "1g.5gb+me": 1, "1g.10gb": 4, "2g.10gb": 3, "3g.20gb": 2, "4g.20gb": 1, "7g.40gb": 1,
    },
    ("0x20B210DE", "0x20B510DE", "0x20F310DE", "0x20F510DE"): {  # A100-80GB, A800-80GB
        "1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1,
    },
    ("0x233010DE", "0x233110DE", "0x232210DE", "0x232410DE"): {  # H100-80GB, H800-80GB
        "1g.10gb": 7, "1g.10gb+me": 1, "1g.20gb": 4, "2g.20gb": 3, "3g.40gb": 2, "4g.40gb": 1, "7g.80gb": 1,
    },
    ("0x232110DE", "0x233A10DE"): {  # H100 NVL, H800 NVL
        "1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.47gb": 2, "4g.47gb": 1, "7g.94gb": 1,
    },
    ("0x234210DE", "0x233D10DE", "0x20B610DE", "0x232910DE"): {  # H100-96GB, PG506-96GB, GH200, H20
        "1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1,
    },
    ("0x233510DE", "0x233B10DE"): {  # H200 141GB, H200 NVL
        "1g.18gb": 7, "1g.18gb+me": 1, "1g.35gb": 4, "2g.35gb": 3, "3g.71gb": 2, "4g.71gb": 1, "7g.141gb": 1,
    },
    ("0x234810DE",): {  # GH200 144G HBM3e
        "1g.18gb": 7, "1g.18gb+me": 1, "1g.36gb": 4, "2g.36gb": 3, "3g.72gb": 2, "4g.72gb": 1, "7g.144gb": 1,
    },
    ("0x290110DE",): {  # B200
        "1g.23gb": 7, "1g.23gb+me": 1, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "4g.90gb": 1, "7g.180gb": 1,
    },
    ("0x294110DE",): {  # GB200 HGX
        "1g.23gb": 7, "1g.23gb+me": 1, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "4g.93gb": 1, "7g.186gb": 1,
    },
    ("0x318210DE",): {  # B300
        "1g.34gb": 7, "1g.34gb+me": 1, "1g.67gb": 4, "2g.67gb": 3, "3g.135gb": 2, "4g.135gb": 1, "7g.269gb": 1,
    },
    ("0x31C210DE",): {  # GB300
        "1g.35gb": 7, "1g.35gb+me": 1, "1g.70gb": 4, "2g.70gb": 3, "3g.139gb": 2, "4g.139gb": 1, "7g.278gb": 1,
    },
    ("0x2BB510DE",): {  # RTX PRO 6000 Blackwell
        "1g.24gb": 4, "1g.24gb+me": 1, "1g.24gb+gfx": 4, "1g.24gb+me.all": 1, "1g.24gb-me": 4,
        "2g.48gb": 2, "2g.48gb+gfx": 2, "2g.48gb+me.all": 1, "2g.48gb-me": 2, "4g.96gb": 1, "4g.96gb+gfx": 1,
    },
    ("0x20B710DE",): {  # A30-24GB
        "1g.6gb": 4, "1g.6gb+me": 1, "2g.12gb": 2, "2g.12gb+me": 1, "4g.24gb": 1,
    },
}  # fmt: skip


def _operator_config() -> dict[str, list[dict]]:
    return parse_mig_parted(yaml.safe_load(real_text("05"))["data"]["config.yaml"])


@pytest.mark.parametrize("ids", sorted(NVIDIA_PROFILE_COUNTS), ids=lambda ids: ids[0])
def test_every_device_group_of_nvidias_config_has_its_profiles_and_counts(ids):
    geometries = {geometry_for_device(i) for i in ids}
    assert len(geometries) == 1 and None not in geometries, ids
    (geometry,) = geometries
    assert set(geometry.pci_device_ids) == set(ids)
    assert {p.name: p.max_instances for p in geometry.profiles} == NVIDIA_PROFILE_COUNTS[ids]


def test_the_extracted_table_covers_every_device_and_profile_of_the_operator_config():
    """Every device ID the config names, and every profile an all-<profile> preset names, is in the table above
    (so in the catalogue), except the first GB200 profiles the config still carries (STALE_PRESET_PROFILES)."""
    configs = _operator_config()
    named_ids = {i for entries in configs.values() for e in entries for i in e["device_filter"] or ()}
    assert named_ids == {i for ids in NVIDIA_PROFILE_COUNTS for i in ids}
    preset_profiles = {
        p for name, entries in configs.items() if name.startswith("all-") for e in entries for p in e["mig_devices"]
    }
    table_profiles = {p for counts in NVIDIA_PROFILE_COUNTS.values() for p in counts}
    assert preset_profiles - table_profiles == STALE_PRESET_PROFILES
    # The counts of the all-<profile> presets are the table's, device filter by device filter.
    for name, entries in configs.items():
        for entry in entries:
            if not name.startswith("all-") or name == "all-balanced" or len(entry["mig_devices"]) != 1:
                continue
            ((profile, count),) = entry["mig_devices"].items()
            if profile in STALE_PRESET_PROFILES:
                continue
            groups = [
                ids
                for ids in NVIDIA_PROFILE_COUNTS
                if not entry["device_filter"] or set(ids) & set(entry["device_filter"])
            ]
            offering = [NVIDIA_PROFILE_COUNTS[ids][profile] for ids in groups if profile in NVIDIA_PROFILE_COUNTS[ids]]
            assert offering and set(offering) == {count}, (name, entry, offering)


def test_every_catalogued_geometry_comes_from_nvidias_config():
    assert {frozenset(g.pci_device_ids) for g in CATALOGUE} == {frozenset(ids) for ids in NVIDIA_PROFILE_COUNTS}


@pytest.mark.parametrize(
    ("product", "key"),
    [
        ("NVIDIA-H200", "H200-141GB"),
        ("NVIDIA-H200-NVL", "H200-141GB"),
        ("NVIDIA-GH200-480GB", "H100-96GB"),
        ("NVIDIA-H20", "H100-96GB"),
        ("NVIDIA-GH200-144G-HBM3e", "GH200-144GB"),
        ("NVIDIA-B200", "B200-180GB"),
        ("NVIDIA-GB200", "GB200-186GB"),
        ("NVIDIA-B300-SXM6-AC", "B300-269GB"),
        ("NVIDIA-GB300", "GB300-278GB"),
        ("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition", "RTX-PRO-6000-96GB"),
    ],
)
def test_gfd_product_names_of_hopper_and_blackwell_find_their_geometry(product, key):
    assert product_geometry(product).key == key


@pytest.mark.parametrize(("geometry", "profile"), [(g, p) for g in CATALOGUE for p in g.profiles], ids=str)
def test_what_each_strategy_advertises_for_a_gpu_full_of_one_profile(geometry, profile):
    """NVIDIA/k8s-device-plugin @ 1b826acc: mixed advertises nvidia.com/mig-<profile> with '+' written '.'
    (internal/rm/rm.go), single advertises every MIG device as nvidia.com/gpu and labels the product
    <model>-MIG-<profile> (internal/lm/mig-strategy.go). Eight GPUs of the all-<profile> preset."""
    product = geometry.products[0]
    per_gpu = [{profile.name: profile.max_instances}] * 8
    resources, label, problems = advertised_after(geometry, per_gpu, "mixed", product)
    assert resources == {"nvidia.com/mig-" + profile.name.replace("+", "."): 8 * profile.max_instances}
    assert (label, problems) == (product, [])
    resources, label, problems = advertised_after(geometry, per_gpu, "single", product)
    assert resources == {"nvidia.com/gpu": 8 * profile.max_instances}
    assert (label, problems) == (f"{product}-MIG-{profile.name}", [])
    assert preset_layouts(geometry)["all-" + profile.name.replace("+", ".")] == {profile.name: profile.max_instances}


B200 = product_geometry("NVIDIA-B200")
RTX_PRO = product_geometry("NVIDIA-RTX-PRO-6000-Blackwell-Server-Edition")


@pytest.mark.parametrize(
    ("geometry", "text", "placed"),
    [
        (B200, "3g.90gb, 2g.45gb, 1g.23gb, 1g.23gb", [("1g.23gb", 0), ("1g.23gb", 1), ("2g.45gb", 2), ("3g.90gb", 4)]),
        (B200, "7x1g.23gb", [("1g.23gb", s) for s in range(7)]),
        (B200, "1g.23gb+me@6, 3x2g.45gb", [("2g.45gb", 0), ("2g.45gb", 2), ("2g.45gb", 4), ("1g.23gb+me", 6)]),
        (product_geometry("NVIDIA-GB200"), "4g.93gb, 3g.93gb", [("4g.93gb", 0), ("3g.93gb", 4)]),
        (
            product_geometry("NVIDIA-H200"),
            "1g.35gb@0, 1g.35gb@2, 3g.71gb@4",
            [("1g.35gb", 0), ("1g.35gb", 2), ("3g.71gb", 4)],
        ),
        (RTX_PRO, "2g.48gb+gfx, 1g.24gb-me, 1g.24gb+me", [("1g.24gb-me", 0), ("1g.24gb+me", 1), ("2g.48gb+gfx", 2)]),
        (RTX_PRO, "4g.96gb+gfx", [("4g.96gb+gfx", 0)]),
        (product_geometry("NVIDIA-A30"), "2g.12gb+me, 2g.12gb", [("2g.12gb+me", 0), ("2g.12gb", 2)]),
    ],
)
def test_the_carve_form_takes_the_new_profiles_and_variants(geometry, text, placed):
    placements, errors = parse_slots(geometry, text)
    assert errors == [] and sorted(placements, key=lambda p: p[1]) == placed
    assert validate_placements(geometry, placements) == []


@pytest.mark.parametrize(
    ("geometry", "text", "words"),
    [
        (RTX_PRO, "1g.24gb+me.all, 1g.24gb+me", "Only one instance may take the media extensions"),
        (RTX_PRO, "2x 2g.48gb+me.all", "At most 1 × 2g.48gb+me.all"),
        (RTX_PRO, "5x1g.24gb-me", "At most 4 × 1g.24gb-me"),
        (RTX_PRO, "2g.48gb@1", "may start at 0, 2"),
        (B200, "2x1g.23gb+me", "At most 1 × 1g.23gb+me"),
        (B200, "3g.90gb@2", "may start at 0, 4"),
        (B200, "1g.10gb", "has no MIG profile"),
    ],
)
def test_the_carve_form_refuses_what_the_new_gpus_cannot_hold(geometry, text, words):
    placements, errors = parse_slots(geometry, text)
    if not errors:
        errors = validate_placements(geometry, placements)
    assert any(words in e for e in errors), errors
    assert layout_problems(geometry, dict(Counter(n for n, _ in placements))) or errors


def test_the_balanced_preset_of_every_new_gpu_is_the_operators():
    configs = _operator_config()
    balanced = {tuple(e["device_filter"]): e["mig_devices"] for e in configs["all-balanced"]}
    for ids, layout in balanced.items():
        geometry = geometry_for_device(ids[0])
        assert preset_layouts(geometry)["all-balanced"] == layout, geometry.key
