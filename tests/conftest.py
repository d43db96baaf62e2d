import os
import signal

import pytest


# Tests send SIGINT to the processes they start (Ctrl-C tears a lab down). A
# suite started as a background job inherits SIGINT ignored, and so would every
# process it starts: restore the default so the tests do not depend on how
# they were launched.
signal.signal(signal.SIGINT, signal.default_int_handler)

pytest_plugins = ["nslab.runtime.testing"]

HERE = os.path.dirname(os.path.abspath(__file__))
DATA = os.path.join(HERE, "data")
ROOT = os.path.dirname(HERE)


def data(*parts: str) -> str:
    return os.path.join(DATA, *parts)



@pytest.fixture(scope="session", autouse=True)
def _rx_timestamps_held_in_a_guest():
    """In the stock-kernel guest (TCG), the kernel's receive time-stamping stays
    switched on for the whole run, so it is never patched while traffic flows
    (nslab.runtime.testing.hold_rx_timestamps says why)."""
    from nslab.runtime.testing import hold_rx_timestamps, stock_kernel
    held = hold_rx_timestamps() if stock_kernel() else None
    yield
    if held is not None:
        held.close()
