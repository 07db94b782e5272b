# `cmake --install <build> --component torch` builds the PyTorch backend
# (chorus_torch) against this build's libchorus and installs it into
# <prefix>/lib/python3.<minor>/dist-packages (on sys.path for /usr and
# /usr/local on Debian), linked with an rpath to <prefix>/<libdir> so that
# `import chorus_torch` finds the installed libchorus. The build happens at
# install time, in <build>/integrations/torch-install (never in the source
# tree), because compiling against the torch headers takes about a minute
# and needs python3-torch, libtorch-dev and pybind11-dev; the component is
# therefore left out of a plain `cmake --install`.
set(CHORUS_TORCH_PYTHON /usr/bin/python3 CACHE FILEPATH "Python with torch for the PyTorch backend")
set(CHORUS_TORCH_PYTHON_DIR "" CACHE STRING
    "Install directory of chorus_torch, relative to the prefix (default lib/python3.<minor>/dist-packages)")
set(_chorus_torch_src ${CMAKE_CURRENT_LIST_DIR})
set(_chorus_torch_work ${PROJECT_BINARY_DIR}/integrations/torch-install)
install(CODE "
  set(pydir \"${CHORUS_TORCH_PYTHON_DIR}\")
  if(pydir STREQUAL \"\")
    execute_process(COMMAND \"${CHORUS_TORCH_PYTHON}\" -c \"import sys; print('lib/python3.%d/dist-packages' % sys.version_info[1])\"
                    OUTPUT_VARIABLE pydir OUTPUT_STRIP_TRAILING_WHITESPACE COMMAND_ERROR_IS_FATAL ANY)
  endif()
  set(rpath \"\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_LIBDIR}\")
  message(STATUS \"chorus_torch: building against $<TARGET_FILE_DIR:chorus> (rpath \${rpath})\")
  file(REMOVE_RECURSE \"${_chorus_torch_work}\")
  execute_process(
    COMMAND \${CMAKE_COMMAND} -E env CHORUS_TORCH_RPATH=\${rpath}
            \"${_chorus_torch_src}/build_ext.sh\" \"${CHORUS_TORCH_PYTHON}\" \"${_chorus_torch_src}\"
            \"${PROJECT_SOURCE_DIR}/include\" \"$<TARGET_FILE_DIR:chorus>\" \"${_chorus_torch_work}\"
    COMMAND_ERROR_IS_FATAL ANY)
  file(INSTALL \"${_chorus_torch_work}/chorus_torch\" DESTINATION \"\${CMAKE_INSTALL_PREFIX}/\${pydir}\"
       PATTERN __pycache__ EXCLUDE)
" COMPONENT torch EXCLUDE_FROM_ALL)
