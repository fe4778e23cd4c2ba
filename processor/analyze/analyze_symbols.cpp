// analyze_symbols.cpp - see analyze_symbols.h.
#include "analyze_symbols.h"

#include <cxxabi.h>
#include <dlfcn.h>
#include <elf.h>
#include <dwarf.h>
#include <elfutils/libdw.h>
#include <elfutils/libdwfl.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <type_traits>

namespace strata {
namespace analyze {
namespace {

// The libdw entry points we use, resolved from libdw.so.1 at run time.
struct Dw {
	void *handle = nullptr;
	decltype(&dwfl_begin) begin = nullptr;
	decltype(&dwfl_end) end = nullptr;
	decltype(&dwfl_report_begin) report_begin = nullptr;
	decltype(&dwfl_report_elf) report_elf = nullptr;
	decltype(&dwfl_report_end) report_end = nullptr;
	decltype(&dwfl_module_getelf) getelf = nullptr;
	decltype(&dwfl_module_addrinfo) addrinfo = nullptr;
	decltype(&dwfl_module_getsrc) getsrc = nullptr;
	decltype(&dwfl_lineinfo) lineinfo = nullptr;
	decltype(&dwfl_module_addrdie) addrdie = nullptr;
	decltype(&dwarf_child) child = nullptr;
	decltype(&dwarf_siblingof) siblingof = nullptr;
	decltype(&dwarf_haspc) haspc = nullptr;
	decltype(&dwarf_tag) tag = nullptr;
	decltype(&dwarf_attr) attr = nullptr;
	decltype(&dwarf_formudata) formudata = nullptr;
	decltype(&dwarf_getsrcfiles) getsrcfiles = nullptr;
	decltype(&dwarf_filesrc) filesrc = nullptr;
	Dwfl_Callbacks cb{};
	char *debuginfo_path = nullptr;

	bool load()
	{
		handle = dlopen("libdw.so.1", RTLD_NOW | RTLD_LOCAL);
		if (!handle)
			return false;
		bool ok = true;
		auto get = [&](auto *fp, const char *name) {
			void *p = dlsym(handle, name);
			ok = ok && p;
			*fp = reinterpret_cast<std::remove_pointer_t<decltype(fp)>>(p);
		};
		get(&begin, "dwfl_begin");
		get(&end, "dwfl_end");
		get(&report_begin, "dwfl_report_begin");
		get(&report_elf, "dwfl_report_elf");
		get(&report_end, "dwfl_report_end");
		get(&getelf, "dwfl_module_getelf");
		get(&addrinfo, "dwfl_module_addrinfo");
		get(&getsrc, "dwfl_module_getsrc");
		get(&lineinfo, "dwfl_lineinfo");
		get(&addrdie, "dwfl_module_addrdie");
		get(&child, "dwarf_child");
		get(&siblingof, "dwarf_siblingof");
		get(&haspc, "dwarf_haspc");
		get(&tag, "dwarf_tag");
		get(&attr, "dwarf_attr");
		get(&formudata, "dwarf_formudata");
		get(&getsrcfiles, "dwarf_getsrcfiles");
		get(&filesrc, "dwarf_filesrc");
		get(&cb.find_elf, "dwfl_build_id_find_elf");
		get(&cb.find_debuginfo, "dwfl_standard_find_debuginfo");
		get(&cb.section_address, "dwfl_offline_section_address");
		// Where separate debug files are looked for (libdw's syntax,
		// default ":.debug:/usr/lib/debug": .build-id/xx/yyyy.debug under
		// each directory, then debuglink names).
		if (const char *p = getenv("STRATA_DEBUGINFO_PATH"))
			debuginfo_path = strdup(p);
		cb.debuginfo_path = &debuginfo_path;
		if (!ok) {
			dlclose(handle);
			handle = nullptr;
		}
		return ok;
	}
};

struct Segment {
	uint64_t vaddr, memsz, offset, filesz;
};

// One ELF file: its PT_LOAD segments (read with plain <elf.h>) and a libdw
// module reported at base 0 (module address = ELF vaddr + dwbias).
struct Object {
	std::string path;
	std::string build_id; // hex, from the NT_GNU_BUILD_ID note; "" if none
	bool ok = false;
	bool unresolved = false; // an address in it had no symbol
	std::vector<Segment> loads;
	Dwfl *dwfl = nullptr;
	Dwfl_Module *mod = nullptr;
	GElf_Addr dwbias = 0;

	bool vaddr_of_offset(uint64_t off, uint64_t *vaddr) const
	{
		for (const Segment &s : loads)
			if (off >= s.offset && off - s.offset < s.filesz) {
				*vaddr = s.vaddr + (off - s.offset);
				return true;
			}
		return false;
	}
	bool contains_vaddr(uint64_t v) const
	{
		for (const Segment &s : loads)
			if (v >= s.vaddr && v - s.vaddr < s.memsz)
				return true;
		return false;
	}
};

// The GNU build id of a note segment's content, in hex; "" if none.
std::string build_id_of(const std::vector<unsigned char> &notes)
{
	size_t at = 0;
	while (at + 12 <= notes.size()) {
		uint32_t namesz, descsz, type;
		std::memcpy(&namesz, &notes[at], 4);
		std::memcpy(&descsz, &notes[at + 4], 4);
		std::memcpy(&type, &notes[at + 8], 4);
		const size_t name_at = at + 12, desc_at = name_at + ((namesz + 3u) & ~3u);
		if (namesz > notes.size() || descsz > notes.size() || desc_at + descsz > notes.size())
			break;
		if (type == NT_GNU_BUILD_ID && namesz == 4 && !std::memcmp(&notes[name_at], "GNU", 4) &&
		    descsz && descsz <= 64) {
			std::string hexid;
			char b[3];
			for (size_t i = 0; i < descsz; i++) {
				std::snprintf(b, sizeof b, "%02x", notes[desc_at + i]);
				hexid += b;
			}
			return hexid;
		}
		at = desc_at + ((descsz + 3u) & ~3u);
	}
	return "";
}

bool read_loads(const std::string &path, std::vector<Segment> *out, std::string *build_id)
{
	// Paths come from the trace: open nothing but a regular file, and never
	// block on one (a FIFO named by a hostile trace).
	int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
	if (fd < 0)
		return false;
	struct stat sb;
	if (fstat(fd, &sb) != 0 || !S_ISREG(sb.st_mode)) {
		close(fd);
		return false;
	}
	Elf64_Ehdr eh;
	bool ok = pread(fd, &eh, sizeof eh, 0) == static_cast<ssize_t>(sizeof eh) &&
		  std::equal(eh.e_ident, eh.e_ident + SELFMAG, ELFMAG) &&
		  eh.e_ident[EI_CLASS] == ELFCLASS64 && eh.e_phentsize == sizeof(Elf64_Phdr) &&
		  eh.e_phnum < 512;
	for (unsigned i = 0; ok && i < eh.e_phnum; i++) {
		Elf64_Phdr ph;
		if (pread(fd, &ph, sizeof ph, static_cast<off_t>(eh.e_phoff + i * sizeof ph)) !=
		    static_cast<ssize_t>(sizeof ph)) {
			ok = false;
			break;
		}
		if (ph.p_type == PT_LOAD)
			out->push_back({ph.p_vaddr, ph.p_memsz, ph.p_offset, ph.p_filesz});
		if (ph.p_type == PT_NOTE && build_id->empty() && ph.p_filesz <= 65536) {
			std::vector<unsigned char> notes(ph.p_filesz);
			if (pread(fd, notes.data(), notes.size(), static_cast<off_t>(ph.p_offset)) ==
			    static_cast<ssize_t>(notes.size()))
				*build_id = build_id_of(notes);
		}
	}
	close(fd);
	return ok && !out->empty();
}

// System headers (libstdc++'s std::mutex, gthr...) are not where a user
// looks for their lock: prefer the first location outside them.
bool system_file(const std::string &f)
{
	return f.rfind("/usr/include/", 0) == 0 || f.rfind("/usr/lib/gcc/", 0) == 0;
}

std::string demangle(const char *name)
{
	// Only mangled names: "m" alone would demangle as the type "unsigned long".
	if (std::strncmp(name, "_Z", 2) != 0)
		return name;
	int st = 0;
	char *d = abi::__cxa_demangle(name, nullptr, nullptr, &st);
	std::string out = (st == 0 && d) ? d : name;
	std::free(d);
	return out;
}

std::string hex(uint64_t v)
{
	char b[32];
	std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
	return b;
}

} // namespace

struct SymbolTable::Impl {
	Dw dw;
	bool dw_tried = false, dw_ok = false;
	std::map<std::string, Object> objects;
	// Per process: (object, runtime bias = runtime address - ELF vaddr).
	std::map<uint32_t, std::vector<std::pair<Object *, uint64_t>>> procs;
	// Mappings kept for "object+offset" when nothing else is known.
	std::vector<Mapping> maps;

	Object *object(const std::string &path)
	{
		auto it = objects.find(path);
		if (it != objects.end())
			return &it->second;
		Object &o = objects[path];
		o.path = path;
		o.ok = read_loads(path, &o.loads, &o.build_id);
		return &o;
	}

	// The DIEs whose ranges contain pc, outermost first (subprogram,
	// lexical blocks, inlined subroutines), looking through namespaces
	// and classes.  dwarf_getscopes gives only the innermost inline.
	bool scopes_at(Dwarf_Die *parent, Dwarf_Addr pc, std::vector<Dwarf_Die> *path, int depth)
	{
		Dwarf_Die c;
		if (depth > 64 || dw.child(parent, &c) != 0)
			return false;
		do {
			int t = dw.tag(&c);
			if (dw.haspc(&c, pc) > 0) {
				path->push_back(c);
				scopes_at(&c, pc, path, depth + 1);
				return true;
			}
			if ((t == DW_TAG_namespace || t == DW_TAG_class_type || t == DW_TAG_structure_type ||
			     t == DW_TAG_union_type) &&
			    scopes_at(&c, pc, path, depth + 1))
				return true;
		} while (dw.siblingof(&c, &c) == 0);
		return false;
	}

	/*
	 * file:line of a code address.  When the line table points into a
	 * system header (code inlined from std::mutex::lock...), walk the
	 * inlined-subroutine scopes outwards and take the first call site
	 * outside system headers: that is the user's line.
	 */
	std::string location(Dwfl_Module *mod, GElf_Addr a)
	{
		Dwfl_Line *line = dw.getsrc(mod, a);
		int lineno = 0;
		const char *file =
			line ? dw.lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr) : nullptr;
		if (!file)
			return "";
		std::string first = std::string(file) + ":" + std::to_string(lineno);
		if (!system_file(file))
			return first;
		Dwarf_Addr bias = 0;
		Dwarf_Die *cu = dw.addrdie(mod, a, &bias);
		Dwarf_Files *files = nullptr;
		size_t nfiles = 0;
		if (!cu || dw.getsrcfiles(cu, &files, &nfiles) != 0)
			return first;
		std::vector<Dwarf_Die> path; // outermost first
		scopes_at(cu, a - bias, &path, 0);
		std::string out = first;
		for (size_t i = path.size(); i-- > 0;) {
			if (dw.tag(&path[i]) != DW_TAG_inlined_subroutine)
				continue;
			Dwarf_Attribute am;
			Dwarf_Word fi = 0, li = 0;
			if (dw.formudata(dw.attr(&path[i], DW_AT_call_file, &am), &fi) != 0 ||
			    dw.formudata(dw.attr(&path[i], DW_AT_call_line, &am), &li) != 0 || fi >= nfiles)
				continue;
			const char *f = dw.filesrc(files, fi, nullptr, nullptr);
			if (f && !system_file(f)) {
				out = std::string(f) + ":" + std::to_string(li) + " (via " + first + ")";
				break;
			}
		}
		return out;
	}

	void open_dw(Object *o)
	{
		if (o->dwfl || !o->ok)
			return;
		if (!dw_tried) {
			dw_tried = true;
			dw_ok = dw.load();
		}
		if (!dw_ok)
			return;
		o->dwfl = dw.begin(&dw.cb);
		if (!o->dwfl)
			return;
		dw.report_begin(o->dwfl);
		o->mod = dw.report_elf(o->dwfl, o->path.c_str(), o->path.c_str(), -1, 0, false);
		dw.report_end(o->dwfl, nullptr, nullptr);
		if (o->mod)
			dw.getelf(o->mod, &o->dwbias);
	}
};

SymbolTable::SymbolTable(const std::vector<Mapping> &maps) : impl_(new Impl)
{
	for (const Mapping &m : maps)
		add(m);
}

void SymbolTable::add(const Mapping &m)
{
	impl_->maps.push_back(m);
	Object *o = impl_->object(m.path);
	uint64_t v = 0;
	if (!o->ok || !o->vaddr_of_offset(m.offset, &v))
		return;
	auto &list = impl_->procs[m.proc];
	bool seen = false;
	for (auto &e : list)
		seen = seen || e.first == o;
	if (!seen)
		list.push_back({o, m.start - v});
}

SymbolTable::~SymbolTable()
{
	for (auto &kv : impl_->objects)
		if (kv.second.dwfl)
			impl_->dw.end(kv.second.dwfl);
	if (impl_->dw.handle)
		dlclose(impl_->dw.handle);
	std::free(impl_->dw.debuginfo_path);
}

bool SymbolTable::have_libdw() const
{
	return impl_->dw_ok;
}

namespace {

// The Debian package that installed `path` (dpkg's file lists, read
// directly: no process, no shell), or "".
std::string package_of(const std::string &path)
{
	const std::string dir = "/var/lib/dpkg/info/";
	DIR *d = opendir(dir.c_str());
	if (!d)
		return "";
	std::string found;
	while (const dirent *e = readdir(d)) {
		const std::string n = e->d_name;
		if (n.size() < 6 || n.compare(n.size() - 5, 5, ".list") != 0)
			continue;
		FILE *f = std::fopen((dir + n).c_str(), "r");
		if (!f)
			continue;
		char line[4096];
		while (std::fgets(line, sizeof line, f)) {
			line[std::strcspn(line, "\n")] = '\0';
			if (path == line) {
				found = n.substr(0, n.size() - 5);
				break;
			}
		}
		std::fclose(f);
		if (!found.empty())
			break;
	}
	closedir(d);
	return found.substr(0, found.find(':')); // "pkg:amd64" -> "pkg"
}

} // namespace

std::vector<MissingDebug> SymbolTable::missing_debug() const
{
	std::vector<MissingDebug> out;
	for (const auto &kv : impl_->objects) {
		const Object &o = kv.second;
		if (!o.unresolved)
			continue;
		MissingDebug m;
		m.object = o.path;
		m.build_id = o.build_id;
		if (o.build_id.size() > 2)
			m.debug_file = "/usr/lib/debug/.build-id/" + o.build_id.substr(0, 2) + "/" +
				       o.build_id.substr(2) + ".debug";
		struct stat sb;
		m.debug_file_present = !m.debug_file.empty() && stat(m.debug_file.c_str(), &sb) == 0;
		m.package = package_of(o.path);
		m.libdw = impl_->dw_ok;
		out.push_back(m);
	}
	return out;
}

Symbol SymbolTable::lookup(uint32_t proc, uint64_t addr, bool is_code)
{
	Symbol s;
	auto pit = impl_->procs.find(proc);
	if (pit == impl_->procs.end())
		return s;
	for (auto &e : pit->second) {
		Object *o = e.first;
		uint64_t v = addr - e.second;
		if (!o->contains_vaddr(v))
			continue;
		s.object = o->path;
		impl_->open_dw(o);
		if (!o->mod) {
			s.function = o->path.substr(o->path.rfind('/') + 1) + "+" + hex(v);
			o->unresolved = true;
			return s;
		}
		GElf_Addr a = v + o->dwbias, off = 0;
		GElf_Sym sym;
		const char *name = impl_->dw.addrinfo(o->mod, a, &off, &sym, nullptr, nullptr, nullptr);
		if (name) {
			s.function = demangle(name) + (off ? "+" + hex(off) : std::string());
		} else {
			s.function = o->path.substr(o->path.rfind('/') + 1) + "+" + hex(v);
			o->unresolved = true;
		}
		if (is_code)
			s.location = impl_->location(o->mod, a - 1);
		return s;
	}
	return s;
}

std::string SymbolTable::unique_name(uint64_t addr)
{
	std::string name;
	for (const auto &kv : impl_->procs) {
		const Symbol s = lookup(kv.first, addr, false);
		if (s.function.empty())
			continue;
		if (!name.empty() && name != s.function)
			return "";
		name = s.function;
	}
	return name;
}

} // namespace analyze
} // namespace strata
