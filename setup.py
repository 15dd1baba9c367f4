"""Package discovery; everything else is declared in pyproject.toml.

Every part lives inside ``freshindex/`` except the design card's four, which
stay at the repository's top level and install as ``freshindex.<part>``.  Both
are found here, so a new subpackage cannot silently miss the wheel.
"""

from setuptools import find_packages, setup

#: The design card's parts kept at the top level (docs/architecture.md says why).
CARD_PARTS = ("workers", "schedules", "snapshots", "acl")

packages = find_packages(include=["freshindex", "freshindex.*"])
for part in CARD_PARTS:
    packages += [f"freshindex.{name}" for name in find_packages(include=[part, f"{part}.*"])]

setup(packages=packages, package_dir={f"freshindex.{part}": part for part in CARD_PARTS})
