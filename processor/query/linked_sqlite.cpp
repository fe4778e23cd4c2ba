// linked_sqlite.cpp - use_linked_sqlite (trace_tables.h): the tables'
// objects call SQLite through the routines of sqlite_api.h, compiled as a
// loadable extension; a program that links SQLite hands them its own
// routines as its loader would, from an automatic extension that runs at
// each sqlite3_open.  Compiled without STRATA_SQLITE_EXTENSION: the calls
// here are the linked SQLite's.
#include <sqlite3.h>

// trace_tables.cpp (SQLITE_EXTENSION_INIT1).
extern const sqlite3_api_routines *sqlite3_api;

namespace strata {
namespace query {
namespace {

// A SQLite built without extension loading (SQLITE_OMIT_LOAD_EXTENSION)
// hands its automatic extensions no routines: the open fails with why,
// rather than the tables calling through a null table.
int take_routines(sqlite3 *, char **err, const sqlite3_api_routines *api)
{
	if (api == nullptr) {
		if (err)
			*err = sqlite3_mprintf("this SQLite was built without extension loading, which the "
					       "strata tables need");
		return SQLITE_ERROR;
	}
	sqlite3_api = api;
	return SQLITE_OK;
}

} // namespace

int use_linked_sqlite()
{
	// Once per process is enough (a second registration of the same
	// entry point is a no-op in SQLite).
	return sqlite3_auto_extension(reinterpret_cast<void (*)(void)>(take_routines));
}

} // namespace query
} // namespace strata
