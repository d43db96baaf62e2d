"""Hosts: labs that span machines (the SSH controller and agent) and stock kernels
in QEMU guests."""
