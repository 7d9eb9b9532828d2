"""MIG placement on one GPU, checked against the placement tables (MIG User Guide / -lgipp captures)."""

from hypothesis import given
from hypothesis import strategies as st

from vocab.mig import CATALOGUE, place, product_geometry, split_across_gpus

H100 = product_geometry("NVIDIA-H100-80GB-HBM3")
A30 = product_geometry("NVIDIA-A30")


def test_balanced_layout_lands_where_the_driver_puts_it():
    # MIG User Guide example: 3g at 4:4, 2g at 2:2, 1g at 0:1 and 1:1.
    placements = place(H100, {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1})
    assert [(p.profile, p.start, p.size) for p in placements] == [
        ("1g.10gb", 0, 1),
        ("1g.10gb", 1, 1),
        ("2g.20gb", 2, 2),
        ("3g.40gb", 4, 4),
    ]


def test_seven_small_instances_fill_slots_0_to_6():
    assert [p.start for p in place(H100, {"1g.10gb": 7})] == [0, 1, 2, 3, 4, 5, 6]


def test_refuses_what_the_hardware_refuses():
    assert place(H100, {"1g.10gb": 8}) is None  # max 7 instances
    assert place(H100, {"4g.40gb": 1, "3g.40gb": 2}) is None  # 10 compute slices
    assert place(H100, {"7g.80gb": 1, "1g.10gb": 1}) is None  # no room beside a full GPU
    assert place(H100, {"1g.10gb+me": 2}) is None  # one media-extension instance at most
    assert place(H100, {"5g.50gb": 1}) is None  # no such profile
    assert place(A30, {"2g.12gb": 1, "4g.24gb": 1}) is None  # A30 has 4 slices


def test_4g_and_3g_share_a_gpu():
    # Allowed since R510 (MIG guide, Concepts).
    assert [(p.profile, p.start) for p in place(H100, {"4g.40gb": 1, "3g.40gb": 1})] == [("4g.40gb", 0), ("3g.40gb", 4)]


def test_split_even_layout_over_gpus():
    layouts = split_across_gpus(H100, {"1g.10gb": 16, "2g.20gb": 8, "3g.40gb": 8}, 8)
    assert layouts == [{"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1}] * 8


def test_split_uneven_counts_never_overfills_a_gpu():
    layouts = split_across_gpus(H100, {"3g.40gb": 3, "1g.10gb": 2}, 2)
    assert sum(layout.get("3g.40gb", 0) for layout in layouts) == 3
    assert all(place(H100, layout) is not None for layout in layouts)


@given(
    geometry=st.sampled_from(CATALOGUE),
    picks=st.lists(st.integers(min_value=0, max_value=6), min_size=0, max_size=8),
)
def test_any_accepted_placement_respects_the_tables(geometry, picks):
    counts: dict[str, int] = {}
    for i in picks:
        profile = geometry.profiles[i % len(geometry.profiles)]
        counts[profile.name] = counts.get(profile.name, 0) + 1
    placements = place(geometry, counts)
    if placements is None:
        return
    used = set()
    for p in placements:
        profile = geometry.profile(p.profile)
        assert p.start in profile.starts
        span = set(range(p.start, p.start + p.size))
        assert not span & used, "placements overlap"
        assert max(span) < geometry.memory_slices
        used |= span
    assert sum(geometry.profile(p.profile).compute for p in placements) <= geometry.compute_slices
    assert sorted(p.profile for p in placements) == sorted(n for n, c in counts.items() for _ in range(c))
