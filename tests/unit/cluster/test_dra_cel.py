"""CEL device selectors as Kubernetes evaluates them (cluster.dra_cel): the device variable, the quantity and
semver libraries, a missing domain read as an empty map, and errors that say why."""

import pytest

from cluster.dra_cel import CelError, compile_problem, device_variable, selector_matches

H100 = {
    "name": "gpu-0",
    "attributes": {
        "type": {"string": "gpu"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "driverVersion": {"version": "580.82.7"},
        "resource.kubernetes.io/pcieRoot": {"string": "pci0000:10"},
        "index": {"int": 3},
        "healthy": {"bool": True},
    },
    "capacity": {"memory": {"value": "85520809984"}},
}


def matches(expression: str, device: dict = H100, driver: str = "gpu.nvidia.com") -> bool:
    return selector_matches(expression, device_variable(driver, device))


@pytest.mark.parametrize(
    ("expression", "expected"),
    [
        ("device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'", True),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('40Gi'))", True),
        ("device.capacity['gpu.nvidia.com'].memory.isLessThan(quantity('80Gi'))", True),  # 79.6 GiB
        ("device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('81559Mi')) == 0", True),
        ("device.capacity['gpu.nvidia.com'].memory.isGreaterThan(quantity('100G'))", False),
        ("quantity('1Gi').add(quantity('1Gi')) == quantity('2Gi')", True),
        ("quantity('500m').isInteger()", False),
        ("quantity('2k').asInteger() == 2000", True),
        ("quantity('-1').sign() == -1", True),
        ("device.attributes['gpu.nvidia.com'].driverVersion.isGreaterThan(semver('550.54.15'))", True),
        ("device.attributes['gpu.nvidia.com'].driverVersion.major() == 580", True),
        ("device.attributes['gpu.nvidia.com'].index == 3 && device.attributes['gpu.nvidia.com'].healthy", True),
        ("device.attributes['resource.kubernetes.io'].pcieRoot == 'pci0000:10'", True),
        ("'profile' in device.attributes['gpu.nvidia.com']", False),
        ("'anything' in device.attributes['other.example.com']", False),
        ("device.driver == 'mig.example.com' && device.attributes['gpu.nvidia.com'].profile == '1g'", False),
    ],
)
def test_selectors_evaluate_as_kubernetes_does(expression, expected):
    assert matches(expression) is expected


def test_reading_a_missing_attribute_is_a_runtime_error():
    with pytest.raises(CelError, match="CEL runtime error: no such member in mapping: 'profile'"):
        matches("device.attributes['gpu.nvidia.com'].profile == '1g.10gb'")


def test_a_quantity_is_not_a_number():
    with pytest.raises(CelError, match="CEL runtime error"):
        matches("device.capacity['gpu.nvidia.com'].memory > 40")


def test_an_expression_that_is_not_a_bool_is_refused():
    with pytest.raises(CelError, match="must return a bool"):
        matches("device.driver")


def test_compile_problems_are_reported_and_good_expressions_pass():
    assert compile_problem("device.driver ==").startswith("compilation failed")
    assert compile_problem("   ") == "the CEL expression is empty"
    assert compile_problem("device.driver == 'gpu.nvidia.com'") is None
