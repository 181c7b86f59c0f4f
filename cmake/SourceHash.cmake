# cmake -DOUT=<header> -DFILES=<a|b|...> -P SourceHash.cmake
# Writes `#define MHC_CODEGEN_SOURCE_HASH "<16 hex>"`, a digest of the files
# that decide what kernels mhc-compile emits. The JIT's disk cache keys on
# the compiler's --version-info, so a changed code generator never reuses
# kernels that an older one compiled under the same release number.
string(REPLACE "|" ";" files "${FILES}")
list(SORT files)
set(acc "")
foreach(f IN LISTS files)
  file(SHA256 "${f}" h)
  string(APPEND acc "${h}")
endforeach()
string(SHA256 total "${acc}")
string(SUBSTRING "${total}" 0 16 short)
file(WRITE "${OUT}.tmp" "#define MHC_CODEGEN_SOURCE_HASH \"${short}\"\n")
# configure_file leaves OUT untouched when the digest did not change.
configure_file("${OUT}.tmp" "${OUT}" COPYONLY)
