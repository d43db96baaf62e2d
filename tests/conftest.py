import os
import signal


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

