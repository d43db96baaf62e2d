"""nslab: a network-namespace lab that reproduces classic Linux networking studies.

The repository's top-level folders (topologies/, experiments/, ovs/, frr/)
are nslab's subpackages: ``nslab/ovs`` etc. are symbolic links to them, so
the import graph that Python, import-linter and editors see is the real one
(``PYTHONPATH=. python -c "import nslab.ovs"`` works from a checkout).
Studies, topologies, lab extensions, commands and benchmarks are registered
below as entry points; the core finds them there and never imports them.
"""
from setuptools import find_packages, setup

setup(
    name="nslab",
    version="0.2.0",
    description="Network-namespace emulation lab: Mininet-compatible topologies, OVS, FRR, "
                "reproducible studies",
    python_requires=">=3.9",
    packages=find_packages(include=["nslab", "nslab.*"]),
    package_data={
        "nslab": ["templates/*.j2", "published_data/*.json", "studies/*.yaml"],
        "nslab.frr": ["templates/*.j2"],
        "nslab.experiments.alias": ["templates/*.j2"],
        "nslab.experiments.ecmp": ["templates/*.j2"],
        "nslab.experiments.rfc2544": ["templates/*.j2"],
        "nslab.experiments.filestudy": ["templates/*.j2"],
    },
    install_requires=[
        "click>=8.0",
        "pyyaml>=6.0",
        "jinja2>=3.0",
        "markdown>=3.4",
        "matplotlib>=3.5",
        "rich>=12.0",
        "pydantic>=2.5,<3",
        "typing_extensions>=4.6",
        "scipy>=1.9",
        "numpy>=1.22",
        "psutil>=5.9",
        "pyroute2>=0.7",
        "MLRsearch>=1.2",
        "graphviz>=0.20",
        "aiohttp>=3.9",
        # /metrics of `nslab watch --web/--metrics` (Prometheus/OpenMetrics exposition)
        "prometheus_client>=0.17",
        # graph partitioning for labs that span machines (nslab.multihost)
        "networkx>=3.0",
    ],
    extras_require={"parquet": ["pyarrow>=14.0"],  # nslab export --format parquet
                    "test": ["pytest>=7.0", "pytest-timeout>=2.1", "hypothesis>=6.80",
                             "jsonschema>=4.0", "import-linter>=2.0", "pyflakes>=3.0",
                             "pyarrow>=14.0",
                             # the live page in a real browser (Debian's chromium-driver)
                             "selenium>=4.10",
                             # the stock-kernel tier: QEMU guests of the host's own filesystem
                             "virtme-ng>=1.40"]},
    entry_points={
        "console_scripts": ["nslab=nslab.cli:main"],
        "nslab.studies": [
            "alias = nslab.experiments.alias.study:AliasStudy",
            "ecmp = nslab.experiments.ecmp.study:EcmpStudy",
            "rfc2544 = nslab.experiments.rfc2544.study:Rfc2544Study",
            # studies written as files (studies/*.yaml), registered like the others
            "ecmp-failover = nslab.experiments.filestudy.shipped:EcmpFailover",
        ],
        # how `nslab run FILE` and `nslab report DIR` read a study file, by extension
        "nslab.study_loaders": [
            "yaml = nslab.experiments.filestudy.study:study_class",
            "yml = nslab.experiments.filestudy.study:study_class",
        ],
        "nslab.topologies": [
            "single = nslab.topologies.basic:single",
            "pair = nslab.topologies.basic:pair",
            "linear = nslab.topologies.mininet:linear",
            "tree = nslab.topologies.mininet:tree",
            "torus = nslab.topologies.mininet:torus",
            "alias_pair = nslab.topologies.alias:alias_pair",
            "clos = nslab.topologies.clos:clos",
            "rfc2544 = nslab.topologies.rfc2544:dut_chain",
        ],
        # Lab extensions: pieces of a lab beyond namespaces, veths and Linux bridges.
        "nslab.extensions": [
            "ovs = nslab.ovs.extension:OvsExtension",
            "frr = nslab.frr.router:FrrExtension",
        ],
        "nslab.commands": [
            "ovs = nslab.ovs.cli:ovs_group",
            "ethtool = nslab.ovs.cli:ethtool_cmd",
            "vtysh = nslab.frr.cli:vtysh",
            "demo = nslab.topologies.cli:demo",
            "alias = nslab.experiments.alias.cli:alias_group",
            "rfc2544 = nslab.experiments.rfc2544.cli:rfc2544_group",
            "study = nslab.experiments.filestudy.cli:study_group",
        ],
        "nslab.bench": [
            "build = nslab.topologies.bench:build_cmd",
            "clos = nslab.topologies.bench:clos_cmd",
            "dataplane = nslab.topologies.bench:dataplane_cmd",
            "aliases = nslab.experiments.alias.bench:aliases_cmd",
            "watch = nslab.experiments.alias.bench:watch_cmd",
            "generator = nslab.experiments.rfc2544.bench:generator_cmd",
            "search = nslab.experiments.rfc2544.bench:search_cmd",
            "verdicts = nslab.verdictbench:verdicts_cmd",
        ],
    },
)
