"""Package layout (the rest of the metadata is in pyproject.toml).

templates/ and static/ stay top-level folders in the source tree (the layout shows the
architecture) and are installed inside the wheel as webapp/templates and webapp/static.
Templates sit at the top (layout, shared partials) or in one folder per blueprint;
tests/webapp/test_packaging.py builds the wheel and checks that every one of them is in it.
"""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["scheduler_core", "scheduler_core.*", "webapp", "webapp.*"]),
              "webapp.templates", "webapp.static"],
    package_dir={"webapp.templates": "templates", "webapp.static": "static"},
    include_package_data=False,  # the data files are exactly those package_data names
    package_data={
        "scheduler_core.db.migrations": ["script.py.mako"],
        "webapp.templates": ["*.html", "*/*.html"],
        "webapp.static": ["*.js", "*.css", "*.txt"],
    },
)
