// analyze_reader.h - decode a trace directory's `pthread` events for the
// lock analysis (babeltrace2 C API).
#ifndef STRATA_CLI_ANALYZE_READER_H
#define STRATA_CLI_ANALYZE_READER_H

#include <string>

#include "analyze_model.h"

namespace strata {
namespace analyze {

// Every directory under `dir` holding a `metadata` file is read; events of
// all of them are merged in time order.  Each sub-trace is one process.
// Returns false with a message in *err when nothing could be read.
bool read_trace(const std::string &dir, Input *in, std::string *err);

} // namespace analyze
} // namespace strata
#endif
