/*
 * extension.cpp - libstrata-sqlite.so, the query tables as a SQLite
 * loadable extension (docs/query.md): `.load libstrata-sqlite` in the
 * sqlite3 shell, conn.load_extension(...) in Python.  Its only exported
 * symbols are its entry point, sqlite3_strata_init, and the same under the
 * name SQLite derives from the file name.
 */
#include "trace_tables.h"

extern "C" __attribute__((visibility("default"))) int sqlite3_strata_init(sqlite3 *db, char **err,
									  const sqlite3_api_routines *api)
{
	SQLITE_EXTENSION_INIT2(api);
	const int rc = strata::query::register_strata(db);
	if (rc != SQLITE_OK && err)
		*err = sqlite3_mprintf("strata: cannot register its tables: %s", sqlite3_errmsg(db));
	return rc;
}

// The name SQLite derives from the file's ("libstrata-sqlite.so": the
// letters after "lib"), so that `.load libstrata-sqlite` and
// load_extension("libstrata-sqlite") need no entry point named.
extern "C" __attribute__((visibility("default"))) int
sqlite3_stratasqlite_init(sqlite3 *db, char **err, const sqlite3_api_routines *api)
{
	return sqlite3_strata_init(db, err, api);
}
