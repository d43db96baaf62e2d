"""FRRouting for the lab: daemon model, config templates, readiness checks."""
from .daemon import Bfdd, Bgpd, Daemon, DaemonCheckError, Mgmtd, Zebra
from .router import FrrExtension, FrrRouter, frr_of, wait_for_ecmp
from .version import FrrVersion

__all__ = ["Daemon", "Zebra", "Bgpd", "Bfdd", "Mgmtd", "DaemonCheckError", "FrrRouter",
           "FrrExtension", "FrrVersion", "frr_of", "wait_for_ecmp"]
