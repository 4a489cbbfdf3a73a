"""Ships the startup hook ``ascend_memsim.pth`` into site-packages (the rest is pyproject.toml).

setuptools installs only packages and modules; a ``.pth`` file must be placed at the top of
the wheel by hand: ``build_py`` copies it into the build tree (regular wheels) and
``editable_wheel`` into the editable wheel (``pip install -e``).
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel

PTH = "ascend_memsim.pth"
HERE = os.path.dirname(os.path.abspath(__file__))


class BuildPyWithPth(build_py):
    def run(self):
        super().run()
        self.copy_file(os.path.join(HERE, PTH), os.path.join(self.build_lib, PTH))

    def get_outputs(self, include_bytecode=True):
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


class EditableWheelWithPth(editable_wheel):
    def _install_namespaces(self, installation_dir, pth_prefix):
        super()._install_namespaces(installation_dir, pth_prefix)
        self.copy_file(os.path.join(HERE, PTH), os.path.join(installation_dir, PTH))


setup(cmdclass={"build_py": BuildPyWithPth, "editable_wheel": EditableWheelWithPth})
