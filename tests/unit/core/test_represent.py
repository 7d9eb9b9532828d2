"""core.api.kept.Representer answers what DRF's ``Serializer.to_representation`` answers: the same keys in the
same order, the same values of the same types, field class by field class and value kind by value kind."""

from __future__ import annotations

import enum
from datetime import datetime
from types import SimpleNamespace

import pytest
from django.core.exceptions import ObjectDoesNotExist
from django.db import models
from rest_framework import serializers

from core.api.kept import Representer


class Colour(models.TextChoices):
    RED = "red", "Red"
    BLUE = "blue", "Blue"


class Size(enum.IntEnum):
    SMALL = 1
    LARGE = 2


class Shouted(serializers.CharField):
    def to_representation(self, value):
        return str(value).upper()


class Sample(serializers.Serializer):
    text = serializers.CharField()
    number = serializers.IntegerField()
    ratio = serializers.FloatField()
    flag = serializers.BooleanField()
    colour = serializers.ChoiceField(choices=Colour.choices)
    size = serializers.ChoiceField(choices=[(1, "small"), (2, "large")])
    data = serializers.JSONField()
    packed = serializers.JSONField(binary=True)
    when = serializers.DateTimeField()
    loud = Shouted()
    owner = serializers.CharField(source="owner.name")
    whole = serializers.SerializerMethodField()
    method = serializers.CharField(source="greet")
    optional = serializers.CharField(required=False)
    defaulted = serializers.CharField(default="none given")
    nullable = serializers.CharField(allow_null=True)
    secret = serializers.CharField(write_only=True)

    def get_whole(self, instance) -> str:
        if isinstance(instance, dict):
            return f"{instance['text']}/{instance['number']}"
        return f"{instance.text}/{instance.number}"


class Row:
    """An object with the sample's attributes; ``missing`` names the ones it lacks (reading one raises
    AttributeError)."""

    def __init__(self, missing=(), **values):
        for name, value in values.items():
            if name not in missing:
                setattr(self, name, value)

    def greet(self):
        return f"hello {self.text}"


class TextLike(str):
    pass


BASE = {
    "text": "a", "number": 3, "ratio": 0.5, "flag": True, "colour": "red", "size": 2, "data": {"k": [1, 2]},
    "packed": {"k": 1}, "when": None, "loud": "quiet", "owner": SimpleNamespace(name="alice"), "optional": "o",
    "defaulted": "d", "nullable": "n", "secret": "s",
}  # fmt: skip

#: Value kinds each field can meet: exact types it answers as they are, and the ones it must convert.
VARIANTS = [
    {},
    {"text": TextLike("sub"), "number": True, "ratio": 2, "flag": 1, "colour": Colour.BLUE, "size": Size.SMALL},
    {"text": 7, "number": "8", "ratio": "1.5", "flag": "false", "colour": "not-a-choice", "size": "2"},
    {"text": None, "number": None, "ratio": None, "flag": None, "colour": "", "data": None, "loud": None},
    {"data": [1, "two"], "packed": [1], "when": datetime(2026, 12, 4, 19, 30)},
    {"data": "text", "colour": None, "size": None, "owner": SimpleNamespace(name=None)},
]


def typed(answer: dict) -> list:
    """The answer with each value's type beside it: ``1 == True`` and ``1 == 1.0`` must not pass as equal."""
    return [(key, type(value), value) for key, value in answer.items()]


@pytest.mark.parametrize("changes", VARIANTS)
def test_each_field_answers_as_drf_does(changes):
    serializer = Sample()
    row = Row(**{**BASE, **changes})
    assert typed(Representer(serializer)(row)) == typed(serializer.to_representation(row))


def test_a_bool_in_an_integer_field_answers_a_number_and_an_overridden_method_is_called():
    serializer = Sample()
    answer = Representer(serializer)(Row(**{**BASE, "number": True, "loud": "quiet"}))
    assert type(answer["number"]) is int
    assert answer["loud"] == "QUIET"
    assert "secret" not in answer


@pytest.mark.parametrize(
    ("missing", "absent"),
    [
        (("optional",), {"optional"}),
        (("defaulted",), set()),
        (("nullable",), set()),
        (("optional", "nullable"), {"optional"}),
    ],
)
def test_a_missing_attribute_is_skipped_defaulted_or_null_as_drf_decides(missing, absent):
    serializer = Sample()
    row = Row(missing=missing, **BASE)
    answer = Representer(serializer)(row)
    assert typed(answer) == typed(serializer.to_representation(row))
    assert absent == set(Sample().fields) - set(answer) - {"secret"}


def test_a_missing_required_attribute_raises_as_drf_raises():
    serializer = Sample()
    row = Row(missing=("text",), **BASE)
    with pytest.raises(AttributeError) as drf:
        serializer.to_representation(row)
    with pytest.raises(AttributeError) as ours:
        Representer(serializer)(row)
    assert str(ours.value) == str(drf.value)


def test_a_related_object_that_does_not_exist_answers_null():
    class Gone:
        @property
        def owner(self):
            raise ObjectDoesNotExist("no owner")

    class OwnerOnly(serializers.Serializer):
        owner = serializers.CharField(source="owner.name")
        whom = serializers.CharField(source="owner")

    serializer = OwnerOnly()
    assert Representer(serializer)(Gone()) == serializer.to_representation(Gone()) == {"owner": None, "whom": None}


class Record(dict):
    """A mapping with an attribute named as one of its keys: DRF answers the key."""

    text = "the attribute"


def test_a_mapping_answers_its_keys_as_drf_does():
    serializer = Sample()
    row = Record({**BASE, "owner": {"name": "bob"}, "greet": "hi"})
    assert typed(Representer(serializer)(row)) == typed(serializer.to_representation(row))
    assert Representer(serializer)(row)["text"] == "a"


def test_a_method_source_is_called_whatever_the_field():
    class Calls(serializers.Serializer):
        data = serializers.JSONField(source="greet")
        number = serializers.IntegerField(source="count")

    row = Row(text="x")
    row.count = lambda: 4
    serializer = Calls()
    assert typed(Representer(serializer)(row)) == typed(serializer.to_representation(row))
    assert Representer(serializer)(row) == {"data": "hello x", "number": 4}


def test_a_model_serializer_reads_a_related_key_without_loading_the_row():
    from gpus.models import Cluster  # noqa: PLC0415 - a model with a key to itself is not needed elsewhere
    from jobs.models import Job  # noqa: PLC0415

    class JobKeys(serializers.ModelSerializer):
        class Meta:
            model = Job
            fields = ["id", "name", "state", "cluster", "resubmitted_from", "labels", "gpu_util_recent"]

    job = Job(id=5, name="n", state="queued", cluster=Cluster(id=9, name="east"), resubmitted_from_id=4,
              labels={"a": "b"}, gpu_util_recent=None)  # fmt: skip
    serializer = JobKeys()
    assert typed(Representer(serializer)(job)) == typed(serializer.to_representation(job))
    assert Representer(serializer)(job)["resubmitted_from"] == 4  # the key, no query (no database in this test)


def test_a_serializer_that_answers_its_own_way_keeps_it():
    class Shouting(Sample):
        def to_representation(self, instance):
            return {key: str(value).upper() for key, value in super().to_representation(instance).items()}

    serializer = Shouting()
    row = Row(**BASE)
    assert Representer(serializer)(row) == serializer.to_representation(row)
    assert Representer(serializer)(row)["text"] == "A"
