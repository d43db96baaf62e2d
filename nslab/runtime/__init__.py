"""Runtime: a topology built on this machine (plan, netlink, processes, the lab,
its nodes, extensions, capabilities) and removed again by its tag."""
