"""Verify a launch an earlier apply left unverified: the check the command wired in (`Ports.verifier`, the same
`kimik3 verify` apply runs after a change), then its `unverified/` record goes."""

from __future__ import annotations

from kimik3_reconciler.errors import PermanentError
from kimik3_reconciler.model.records import unverified_key
from kimik3_reconciler.model.specs import VerifyServer
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.report import Reporter


def verify_server(spec: VerifyServer, ports: Ports, reporter: Reporter) -> None:
    # The orchestrator leaves this step out when no verifier is wired (--no-verify-server): reaching here without
    # one is a wiring bug, and passing silently would clear a record nobody verified.
    if ports.verifier is None:
        raise PermanentError(f"verify {spec.container}: no verifier is wired into these ports")
    record = ports.state.read(unverified_key(spec.container)) or {}
    reporter.event("verify-resumed", container=spec.container, launched=record.get("date"))
    ports.verifier()  # VerifyFailed when a check fails: apply reverts to the last good profile
    if record.get("fingerprint") == spec.fingerprint:
        ports.state.delete(unverified_key(spec.container))
