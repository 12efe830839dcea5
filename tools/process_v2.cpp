// tools/process_v2.cpp: Boost.Process v2 compiled once for the command line
// (BOOST_PROCESS_V2_SEPARATE_COMPILATION): in Boost 1.81 its header-only mode
// leaves process_environment's setup undefined.
#include <boost/optional.hpp>      // (Boost.Process 1.81 uses these two
#include <boost/type_traits.hpp>  // without including them)
#include <boost/process/v2/src.hpp>
