"""nslab: a network-namespace lab that reproduces classic Linux networking studies."""
from setuptools import setup

setup(
    name="nslab",
    version="0.1.0",
    description="Network-namespace emulation lab: Mininet-compatible topologies, OVS, FRR, reproducible studies",
    python_requires=">=3.9",
    packages=[
        "nslab",
        "nslab.topologies",
        "nslab.experiments",
        "nslab.ovs",
        "nslab.frr",
    ],
    # The folders sit at the top level of the repository but install as
    # subpackages of nslab: a top-level `ovs` would shadow Open vSwitch's own
    # Python bindings.
    package_dir={
        "nslab": "nslab",
        "nslab.topologies": "topologies",
        "nslab.experiments": "experiments",
        "nslab.ovs": "ovs",
        "nslab.frr": "frr",
    },
    package_data={"nslab.frr": ["templates/*.j2"]},
    install_requires=[
        "click>=8.0",
        "pyyaml>=6.0",
        "jinja2>=3.0",
        "matplotlib>=3.5",
        "rich>=12.0",
        "pydantic>=2.5,<3",
        "typing_extensions>=4.6",
        "scipy>=1.9",
        "numpy>=1.22",
        "psutil>=5.9",
        "pyroute2>=0.7",
    ],
    extras_require={"test": ["pytest>=7.0", "pytest-timeout>=2.1", "hypothesis>=6.80",
                             "jsonschema>=4.0",
                             # the stock-kernel tier: QEMU guests of the host's own filesystem
                             "virtme-ng>=1.40"]},
    entry_points={
        "console_scripts": ["nslab=nslab.cli:main"],
        # Lab extensions: the core finds them here and never imports them.
        "nslab.extensions": [
            "ovs = nslab.ovs.extension:OvsExtension",
            "frr = nslab.frr.router:FrrExtension",
        ],
    },
)
