/* Creates the LTTng-UST probes of bench_tp_lttng.h (one file per provider). */
#define TRACEPOINT_CREATE_PROBES
#define TRACEPOINT_DEFINE
#include "bench_tp_lttng.h"
