# -*- Python -*-
import os
import sys

import lit.formats
from lit.llvm import llvm_config
from lit.llvm.subst import ToolSubst

config.name = "MHC"
config.test_format = lit.formats.ShTest(not llvm_config.use_lit_shell)
config.suffixes = [".mlir", ".test"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.mhc_obj_root, "test")
config.excludes = ["CMakeLists.txt", "lit.cfg.py", "lit.site.cfg.py", "unit", "gpu"]

config.substitutions.append(("%PATH%", config.environment["PATH"]))
config.substitutions.append(("%mhc_src", config.mhc_src_root))
config.substitutions.append(("%python", sys.executable))

llvm_config.use_default_substitutions()
llvm_config.with_environment("PATH", config.llvm_tools_dir, append_path=True)

tool_dirs = [config.mhc_tools_dir, config.llvm_tools_dir]
tools = ["mhc-opt", "mhc-compile"]
llvm_config.add_tool_substitutions(tools, tool_dirs)
