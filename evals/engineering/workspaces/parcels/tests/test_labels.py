import pytest

from labels import label
from models import Parcel


def test_cheap_parcel_at_home():
    text = label(Parcel("P1", 1_500, 2_000, "NL"))
    assert "SIGNATURE REQUIRED" not in text
    assert text.endswith("postage EUR 4.95")


def test_valuable_parcel_is_signed_for():
    text = label(Parcel("P2", 4_000, 60_000, "NL"))
    assert "SIGNATURE REQUIRED" in text
    assert text.endswith("postage EUR 9.45")


def test_listed_country_is_signed_for():
    assert "SIGNATURE REQUIRED" in label(Parcel("P3", 500, 1_000, "GR"))


def test_too_heavy_is_refused():
    with pytest.raises(ValueError, match="does not accept"):
        label(Parcel("P4", 40_000, 1_000, "NL"))
