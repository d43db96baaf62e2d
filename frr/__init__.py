"""FRRouting for the lab: daemon model, config templates, readiness checks."""
from .daemon import Bgpd, Daemon, DaemonCheckError, Zebra
from .router import FrrRouter, start_frr, wait_for_ecmp

__all__ = ["Daemon", "Zebra", "Bgpd", "DaemonCheckError", "FrrRouter", "start_frr",
           "wait_for_ecmp"]
