"""Frozen values with no I/O: the profile, facts, plans, the quant catalog and the pin table."""

from kimik3_reconciler.model.catalog import QuantInfo, is_iq_or_tq, lookup
from kimik3_reconciler.model.pins import PINS, SourcePin, pin_for
from kimik3_reconciler.model.profile import Profile, profile_json_schema
from kimik3_reconciler.model.profile_rules import Finding, check_rules
from kimik3_reconciler.model.profile_source import LoadedProfile, ProfileWarning, parse_profile

__all__ = [
    "PINS",
    "Finding",
    "LoadedProfile",
    "Profile",
    "ProfileWarning",
    "QuantInfo",
    "SourcePin",
    "check_rules",
    "is_iq_or_tq",
    "lookup",
    "parse_profile",
    "pin_for",
    "profile_json_schema",
]
