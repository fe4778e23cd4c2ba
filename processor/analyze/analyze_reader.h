// analyze_reader.h - decode a trace directory's `pthread` events for the
// lock analysis, through either trace reader (read_event.h).
#ifndef STRATA_CLI_ANALYZE_READER_H
#define STRATA_CLI_ANALYZE_READER_H

#include <functional>
#include <string>

#include "analyze_model.h"

namespace strata {
class Progress;
namespace rd {
class Source;
}
} // namespace strata

namespace strata {
namespace analyze {

// Every directory under `dir` holding a `metadata` file is read; events of
// all of them are merged in time order.  Each sub-trace is one process.
// Returns false with a message in *err when nothing could be read.
bool read_trace(const std::string &dir, Input *in, std::string *err);

// The same, streaming: each pthread event goes to *on (when not null)
// instead of in->events; *progress (when not null) is updated after each.
// in gets the processes, mappings and counts.
bool read_trace_feed(const std::string &dir, Input *in, EventSink *on, Progress *progress, std::string *err);
// The same from an opened source (its damage and warnings are the
// caller's to finish()); *err empty when the reason was already printed.
bool read_trace_feed(rd::Source &src, Input *in, EventSink *on, Progress *progress, std::string *err);

} // namespace analyze
} // namespace strata
#endif
