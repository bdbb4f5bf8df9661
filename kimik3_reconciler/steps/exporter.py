"""Start, replace and stop the metrics exporter (`kimik3 metrics-serve <profile>`, a host process): the helper
lifecycle (steps/helper.py) with the exporter's records."""

from __future__ import annotations

from kimik3_reconciler.model.helpers import EXPORTER
from kimik3_reconciler.model.specs import ExporterRun, ExporterStop, ExporterUnit
from kimik3_reconciler.ports import Ports
from kimik3_reconciler.steps.helper import run_helper, run_helper_unit, stop_helper
from kimik3_reconciler.steps.report import Reporter


def run_exporter(run: ExporterRun, ports: Ports, reporter: Reporter) -> None:
    run_helper(EXPORTER, run, ports, reporter)


def run_exporter_unit(run: ExporterUnit, ports: Ports, reporter: Reporter) -> None:
    run_helper_unit(EXPORTER, run, ports, reporter)


def stop_exporter(stop: ExporterStop, ports: Ports, reporter: Reporter) -> None:
    stop_helper(EXPORTER, stop, ports, reporter)
