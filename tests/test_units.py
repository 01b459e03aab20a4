import math

import pytest

from kvcalc.out import units
from kvcalc.out.errors import InputError


def test_token_suffixes_are_binary():
    assert units.parse_tokens("4k") == 4096
    assert units.parse_tokens("128K") == 131072
    assert units.parse_tokens("1m") == 1_048_576
    assert units.parse_tokens("4000") == 4000
    assert units.parse_token_list("4k,32k,1m") == [4096, 32768, 1_048_576]


def test_bytes_keep_gb_and_gib_apart():
    assert units.parse_bytes("80GB") == 80e9
    assert units.parse_bytes("80GiB") == 80 * 2**30
    assert units.parse_bytes("512 B") == 512


@pytest.mark.parametrize("bad", ["-4k", "0", "nan", "abc", "1.5", "4x", "", "1e30"])
def test_bad_token_counts(bad):
    with pytest.raises(InputError):
        units.parse_tokens(bad, "--context")


@pytest.mark.parametrize("bad", ["80", "-1GB", "0GB", "xGB", "nanGB"])
def test_bad_bytes_need_a_unit_and_a_positive_value(bad):
    with pytest.raises(InputError):
        units.parse_bytes(bad)


def test_fraction():
    assert units.parse_fraction("90%") == pytest.approx(0.9)
    assert units.parse_fraction("0.5") == 0.5
    for bad in ("0", "1.5", "-0.1", "150%", "nan"):
        with pytest.raises(InputError):
            units.parse_fraction(bad)


def test_formatting():
    assert units.fmt_bytes(9_999) == "9,999 B"
    assert units.fmt_bytes(3_145_728) == "3.146 MB"
    assert units.fmt_seconds(6.0016e-6) == "6.002 us"
    assert units.fmt_seconds(0.52) == "520 ms"
    assert units.fmt_percent(0.651) == "65.1%"
    assert units.fmt_count(float("inf")) == "inf"
    assert not math.isnan(units.GB)


def test_cache_capacities_are_decimal():
    # Mooncake's "3 M tokens" cache is 3,000,000 tokens (only that reproduces its 31.5% hit rate)
    assert units.parse_token_capacity("3m") == 3_000_000
    assert units.parse_token_capacity("500k") == 500_000
    assert units.parse_token_capacity("20000") == 20_000
    for bad in ("-3m", "0", "nan", "3q", "1.5"):
        with pytest.raises(InputError):
            units.parse_token_capacity(bad)


def test_fmt_ms_is_seconds_in_milliseconds_with_the_given_format():
    from kvcalc.out.units import fmt_ms

    # 0.0116712 s = 11.6712 ms; the derivation lines of bench --explain print 3 decimals, plan's targets %g
    assert fmt_ms(0.0116712) == "11.671 ms"
    assert fmt_ms(0.05, "g") == "50 ms" and fmt_ms(2.0, "g") == "2000 ms"
    assert fmt_ms(1.23456, ",.1f") == "1,234.6 ms"


def test_s_to_ms_and_back():
    # 0.0895 s = 89.5 ms (the routed experts' prefill term the per-op table prints); ms_to_s undoes it
    assert units.s_to_ms(0.0895) == pytest.approx(89.5, rel=1e-12)
    assert units.ms_to_s(units.s_to_ms(2.5)) == 2.5


def test_fmt_error_is_signed_with_one_decimal():
    # bench --measured's error, kvcalc / measured - 1: 175.93 s against 166.04 s is +5.96% -> "+6.0%"
    assert units.fmt_error(175.93 / 166.04 - 1) == "+6.0%"
    assert units.fmt_error(19.86 / 59.01 - 1) == "-66.3%" and units.fmt_error(0.0) == "+0.0%"
