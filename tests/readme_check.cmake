# The README's quick start must be samples/hello.cpp, verbatim.
file(READ "${README}" readme)
file(READ "${SAMPLE}" sample)
string(FIND "${readme}" "```cpp\n${sample}```" at)
if(at EQUAL -1)
  message(FATAL_ERROR "README.md's quick start differs from samples/hello.cpp")
endif()
