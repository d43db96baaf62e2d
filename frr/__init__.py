"""FRRouting for the lab: daemon model, config templates, readiness checks."""
from .daemon import Bgpd, Daemon, DaemonCheckError, Zebra
from .router import FrrExtension, FrrRouter, frr_of, wait_for_ecmp

__all__ = ["Daemon", "Zebra", "Bgpd", "DaemonCheckError", "FrrRouter", "FrrExtension", "frr_of",
           "wait_for_ecmp"]
