"""The GPU catalogue: real modelName spellings, MIG profiles and unit fractions."""

from fractions import Fraction

import pytest

from app.policy import gpus


@pytest.mark.parametrize(
    ("label", "family", "memory", "mig", "slices"),
    [
        ("NVIDIA A100-SXM4-80GB", "A100", 80, True, 7),
        ("NVIDIA A100-SXM4-40GB", "A100", 40, True, 7),
        ("NVIDIA A100-PCIE-40GB", "A100", 40, True, 7),
        ("NVIDIA A100 80GB PCIe", "A100", 80, True, 7),
        ("NVIDIA A800 80GB PCIe", "A800", 80, True, 7),
        ("NVIDIA A800-SXM4-80GB", "A800", 80, True, 7),
        ("NVIDIA H100 80GB HBM3", "H100", 80, True, 7),
        ("NVIDIA H100 PCIe", "H100", 80, True, 7),
        ("NVIDIA H800", "H800", 80, True, 7),
        ("NVIDIA H200", "H200", 141, True, 7),
        ("NVIDIA H20", "H20", 96, True, 7),
        ("nvidia h20", "H20", 96, True, 7),
        ("NVIDIA A30", "A30", 24, True, 4),
        ("NVIDIA GeForce RTX 4090", "RTX 4090", 24, False, 0),
        ("NVIDIA L40S", "L40S", 48, False, 0),
        ("NVIDIA L4", "L4", 24, False, 0),
    ],
)
def test_lookup_real_label_spellings(label, family, memory, mig, slices):
    model = gpus.lookup(label)
    assert model is not None
    assert (model.family, model.memory_gb, model.mig, model.slices) == (family, memory, mig, slices)
    assert gpus.supports_mig(label) is mig


def test_h200_is_not_read_as_h20_nor_l40s_as_l40():
    assert gpus.lookup("NVIDIA H200").family == "H200"
    assert gpus.lookup("NVIDIA L40S").family == "L40S"
    assert gpus.lookup("NVIDIA L40").family == "L40"


@pytest.mark.parametrize(
    ("label", "expected"),
    [
        ("NVIDIA A100-SXM4-40GB", "1g.5gb 1g.10gb 2g.10gb 3g.20gb 4g.20gb 7g.40gb 1g.5gb+me"),
        ("NVIDIA A100-SXM4-80GB", "1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb 1g.10gb+me"),
        ("NVIDIA H800", "1g.10gb 1g.20gb 2g.20gb 3g.40gb 4g.40gb 7g.80gb 1g.10gb+me"),
        ("NVIDIA H200", "1g.18gb 1g.35gb 2g.35gb 3g.71gb 4g.71gb 7g.141gb 1g.18gb+me"),
        ("NVIDIA H20", "1g.12gb 1g.24gb 2g.24gb 3g.48gb 4g.48gb 7g.96gb 1g.12gb+me"),
        ("NVIDIA A30", "1g.6gb 2g.12gb 4g.24gb 1g.6gb+me"),
        ("NVIDIA GeForce RTX 4090", ""),
    ],
)
def test_profiles_per_model(label, expected):
    assert gpus.profiles(label) == tuple(expected.split())


def test_unknown_model_is_not_mig_capable():
    assert gpus.lookup("Acme Tensor 9000") is None
    assert gpus.supports_mig("Acme Tensor 9000") is False
    assert gpus.profiles("Acme Tensor 9000") == ()


@pytest.mark.parametrize(
    ("label", "profile", "fraction"),
    [
        ("NVIDIA A100-SXM4-80GB", "3g.40gb", Fraction(3, 7)),
        ("NVIDIA A100-SXM4-80GB", "1g.10gb+me", Fraction(1, 7)),
        ("NVIDIA A100-SXM4-80GB", "7g.80gb", Fraction(1)),
        ("NVIDIA A30", "2g.12gb", Fraction(1, 2)),
        ("NVIDIA A30", "1g.6gb", Fraction(1, 4)),
        ("NVIDIA H100 80GB HBM3", None, Fraction(1)),
        ("NVIDIA GeForce RTX 4090", "", Fraction(1)),
        ("Acme Tensor 9000", "2g.10gb", Fraction(2, 7)),
    ],
)
def test_unit_fraction(label, profile, fraction):
    assert gpus.unit_fraction(label, profile) == fraction


def test_unit_fraction_rejects_a_malformed_profile():
    with pytest.raises(ValueError, match="not a MIG profile"):
        gpus.unit_fraction("NVIDIA A100-SXM4-80GB", "three-sevenths")


def test_profile_memory_slices():
    a100 = gpus.lookup("NVIDIA A100-SXM4-80GB")
    assert a100.profile_slices("3g.40gb") == (3, 4)
    assert a100.profile_slices("1g.10gb") == (1, 1)
    h200 = gpus.lookup("NVIDIA H200")
    assert h200.profile_slices("3g.71gb") == (3, 4)  # two of them fit one H200
