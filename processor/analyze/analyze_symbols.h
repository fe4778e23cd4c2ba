// analyze_symbols.h - symbolize addresses of a traced process from its
// recorded mappings (pthread:mapping events) and the mapped ELF files.
//
// libdw (elfutils) is loaded with dlopen when first needed: `strata` runs
// without it, and then reports "object+0xoffset" only.  Function names come
// from the ELF symbol tables (also for data: a lock's variable name), file:line
// from DWARF when the object or its separate debug file has it.
#ifndef STRATA_CLI_ANALYZE_SYMBOLS_H
#define STRATA_CLI_ANALYZE_SYMBOLS_H

#include <memory>
#include <vector>

#include "analyze_model.h"

namespace strata {
namespace analyze {

class SymbolTable {
public:
	explicit SymbolTable(const std::vector<Mapping> &maps);
	// One more mapping (a reader that learns them as it goes: strata view).
	void add(const Mapping &m);
	~SymbolTable();
	SymbolTable(const SymbolTable &) = delete;
	SymbolTable &operator=(const SymbolTable &) = delete;
	// is_code: `addr` is a return address (line lookup uses addr - 1).
	Symbol lookup(uint32_t proc, uint64_t addr, bool is_code);
	// The function (or data) name of an address shown without its process
	// (a query's column): the name every process that maps `addr` gives
	// it, "" when none maps it or two name it differently.
	std::string unique_name(uint64_t addr);
	bool have_libdw() const;
	// The objects in which an address had no symbol (a stripped binary):
	// their build id, where its debug file would be, their package.
	std::vector<MissingDebug> missing_debug() const;

private:
	struct Impl;
	std::unique_ptr<Impl> impl_;
};

} // namespace analyze
} // namespace strata
#endif
