"""Package layout (the rest of the metadata is in pyproject.toml).

templates/ and static/ stay top-level folders in the source tree (the layout shows the
architecture) and are installed inside the wheel as webapp/templates and webapp/static.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["scheduler_core", "scheduler_core.*", "webapp", "webapp.*"]),
              "webapp.templates", "webapp.static"],
    package_dir={"webapp.templates": "templates", "webapp.static": "static"},
    package_data={
        "scheduler_core.db.migrations": ["script.py.mako"],
        "webapp.templates": ["*.html"],
        "webapp.static": ["*.js", "*.css", "*.txt"],
    },
)
