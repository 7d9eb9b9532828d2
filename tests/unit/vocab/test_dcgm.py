"""dcgm-exporter scrapes parsed from real captures: whole GPUs, a MIG instance, pod attribution, and the label
spellings of different exporter versions."""

import pytest

from tests.realdata import real_text
from vocab.dcgm import parse_scrape

A100_UUID = "GPU-34319582-d595-d1c7-d1d2-179bcfa61660"


def test_a100_with_a_mig_instance():
    readings = parse_scrape(real_text("08"))
    assert [(r.gpu_uuid, r.gpu_instance_id) for r in readings] == [(A100_UUID, None), (A100_UUID, 13)]
    gpu, mig = readings
    assert (gpu.hostname, gpu.gpu_index, gpu.is_mig) == ("ub20-a100-k8s", 0, False)
    # This capture has no GPU_UTIL series: utilisation falls back to the graphics-engine activity.
    assert gpu.utilisation == pytest.approx(99.563)
    assert (gpu.memory_used_mib, gpu.memory_free_mib, gpu.power_w, gpu.temperature_c) == (4845, 35690, 409.692, 61)
    assert (mig.mig_profile, mig.is_mig) == ("1g.5gb", True)
    assert mig.utilisation == pytest.approx(99.5687)
    assert mig.tensor_active == pytest.approx(0.930433) and mig.memory_used_mib is None


def test_t4_uses_gpu_util_and_pods_are_attributed():
    readings = {r.gpu_uuid: r for r in parse_scrape(real_text("09"))}
    t4 = readings["GPU-20c56d28-0da5-6d26-a36a-e7af1ce2586e"]
    assert (t4.model, t4.hostname, t4.utilisation, t4.power_w, t4.temperature_c) == (
        "Tesla T4",
        "424773df46e0",
        0,
        8.969,
        25,
    )
    assert t4.pod == "" and t4.namespace == ""
    a10g = readings["GPU-abc"]
    assert (a10g.model, a10g.pod, a10g.namespace, a10g.container) == (
        "NVIDIA A10G",
        "ray-1111111",
        "ray-llm",
        "ray-worker",
    )


def test_label_spellings_of_other_exporter_versions():
    text = real_text("08")
    renamed = text.replace("Hostname=", "hostname=")  # dcgm-exporter main since 2026-05
    assert [r.hostname for r in parse_scrape(renamed)] == ["ub20-a100-k8s", "ub20-a100-k8s"]
    old = (
        'DCGM_FI_DEV_GPU_UTIL{gpu="1",uuid="GPU-x",pod_name="train-0",pod_namespace="team-vision",'
        'container_name="main",Hostname="n1"} 87\n'
        'DCGM_FI_DEV_GPU_UTIL{gpu="2",uuid="GPU-y",GPU_I_ID="3",GPU_I_PROFILE="3g.40gb",Hostname="n1"} 0\n'
        'DCGM_FI_PROF_GR_ENGINE_ACTIVE{gpu="2",uuid="GPU-y",GPU_I_ID="3",GPU_I_PROFILE="3g.40gb",Hostname="n1"} 0.42\n'
    )
    first, second = parse_scrape(old)
    assert (first.gpu_uuid, first.pod, first.namespace, first.container, first.utilisation) == (
        "GPU-x",
        "train-0",
        "team-vision",
        "main",
        87,
    )
    # GPU_UTIL reads 0 on a MIG instance; the engine activity is what it did.
    assert (second.mig_profile, second.utilisation) == ("3g.40gb", 42.0)


def test_not_the_exposition_format_is_an_error():
    with pytest.raises(ValueError):
        parse_scrape('DCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n')
