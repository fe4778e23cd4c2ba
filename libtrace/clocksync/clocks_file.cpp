// clocks_file.cpp - clocks.json written and read; the layout in clocks_file.h.
#include "clocks_file.h"

#include "json_reader.h"
#include "json_writer.h"

namespace strata {
namespace clocksync {

namespace {

using Style = JsonWriter::Style;

void write_kvm(JsonWriter &w, const KvmFacts &k)
{
	w.begin_object().key("pid").i64(k.pid).key("read").boolean(k.read);
	if (k.read) {
		w.key("tsc_offset").i64(k.tsc_offset).key("tsc_scaling_ratio").u64(k.tsc_scaling_ratio);
		w.key("tsc_scaling_frac_bits").u64(k.tsc_scaling_frac_bits).key("vcpus").u64(k.vcpus);
		w.key("changes").u64(k.changes);
	}
	w.key("checked").boolean(k.checked);
	if (k.checked)
		w.key("agrees").boolean(k.error.empty()).key("error").str(k.error);
	else
		w.key("why_unchecked").str(k.why_unchecked);
	if (k.read && !k.problem.empty())
		w.key("problem").str(k.problem);
	w.end_object();
}

void write_refinement(JsonWriter &w, const Refinement &r)
{
	w.begin_object()
		.key("by")
		.str("strata align")
		.key("match")
		.str(r.match)
		.key("hold_out")
		.str(r.hold_out);
	w.key("messages").u64(r.messages).key("used").u64(r.used).key("held_out").u64(r.held_out);
	w.key("outside_segments").u64(r.outside_segments).key("segments_refined").u64(r.segments_refined);
	w.key("segments_contradicted").u64(r.segments_contradicted).end_object();
}

// One link, its first line at the writer's place, the others at indent + 1.
void write_link(JsonWriter &w, const ClocksLink &l, unsigned indent)
{
	const unsigned in = indent + 1;
	w.begin_object().key("name").str(l.name).key("spec").str(l.spec);
	w.key("role").str(l.follower ? "follower" : "reference");
	w.newline(in).key("source").str(l.source).key("target").str(l.target);
	w.newline(in).key("peer_hostname").str(l.peer_hostname).key("peer_boot_id").str(l.peer_boot_id);
	w.key("peer_clock_offset_ns").i64(l.peer_clock_offset_ns);
	w.newline(in).key("state").str(l.state).key("correlated").boolean(l.correlated);
	w.key("probes").u64(l.probes).key("answered").u64(l.answered).key("used").u64(l.used);
	w.key("min_rtt_ns").i64(l.min_rtt_ns).key("width_now_ns").i64(l.width_now_ns);
	w.key("garbage_bytes").u64(l.garbage_bytes).key("kernel_receive_stamps").u64(l.kernel_receive_stamps);
	w.key("silences").u64(l.silences).key("longest_silence_ns").i64(l.longest_silence_ns);
	w.newline(in).key("segments");
	write_segments(w, l.segments, in);
	if (l.has_kvm) {
		w.newline(in).key("kvm");
		write_kvm(w, l.kvm);
	}
	if (l.has_refined) {
		w.newline(in).key("refined");
		write_refinement(w, l.refined);
	}
	w.end_object();
}

bool str_of(const JsonValue &o, const char *k, std::string *out)
{
	const JsonValue *v = o.get(k);
	if (v && v->kind == JsonValue::Str)
		*out = v->text;
	return v && v->kind == JsonValue::Str;
}

void bool_of(const JsonValue &o, const char *k, bool *out)
{
	if (const JsonValue *v = o.get(k); v && v->kind == JsonValue::Bool)
		*out = v->b;
}

void i64_of(const JsonValue &o, const char *k, int64_t *out)
{
	if (const JsonValue *v = o.get(k))
		v->as_int(out);
}

void u64_of(const JsonValue &o, const char *k, uint64_t *out)
{
	int64_t x;
	if (const JsonValue *v = o.get(k); v && v->as_int(&x) && x >= 0)
		*out = static_cast<uint64_t>(x);
}

void read_kvm(const JsonValue &o, KvmFacts *k)
{
	i64_of(o, "pid", &k->pid);
	bool_of(o, "read", &k->read);
	i64_of(o, "tsc_offset", &k->tsc_offset);
	u64_of(o, "tsc_scaling_ratio", &k->tsc_scaling_ratio);
	u64_of(o, "tsc_scaling_frac_bits", &k->tsc_scaling_frac_bits);
	u64_of(o, "vcpus", &k->vcpus);
	u64_of(o, "changes", &k->changes);
	bool_of(o, "checked", &k->checked);
	str_of(o, "error", &k->error);
	str_of(o, "why_unchecked", &k->why_unchecked);
	str_of(o, "problem", &k->problem);
}

void read_refinement(const JsonValue &o, Refinement *r)
{
	str_of(o, "match", &r->match);
	str_of(o, "hold_out", &r->hold_out);
	u64_of(o, "messages", &r->messages);
	u64_of(o, "used", &r->used);
	u64_of(o, "held_out", &r->held_out);
	u64_of(o, "outside_segments", &r->outside_segments);
	u64_of(o, "segments_refined", &r->segments_refined);
	u64_of(o, "segments_contradicted", &r->segments_contradicted);
}

bool read_link(const JsonValue &o, ClocksLink *l, std::string *why)
{
	std::string role;
	const JsonValue *segs = o.get("segments");
	if (o.kind != JsonValue::Obj || !str_of(o, "name", &l->name) || !str_of(o, "role", &role) || !segs) {
		*why = "a link lacks its name, role or segments";
		return false;
	}
	if (!parse_segments(*segs, &l->segments, why)) {
		*why = "link '" + l->name + "': " + *why;
		return false;
	}
	l->follower = role == "follower";
	str_of(o, "spec", &l->spec);
	str_of(o, "source", &l->source);
	str_of(o, "target", &l->target);
	str_of(o, "peer_hostname", &l->peer_hostname);
	str_of(o, "peer_boot_id", &l->peer_boot_id);
	i64_of(o, "peer_clock_offset_ns", &l->peer_clock_offset_ns);
	str_of(o, "state", &l->state);
	bool_of(o, "correlated", &l->correlated);
	u64_of(o, "probes", &l->probes);
	u64_of(o, "answered", &l->answered);
	u64_of(o, "used", &l->used);
	i64_of(o, "min_rtt_ns", &l->min_rtt_ns);
	i64_of(o, "width_now_ns", &l->width_now_ns);
	u64_of(o, "garbage_bytes", &l->garbage_bytes);
	u64_of(o, "kernel_receive_stamps", &l->kernel_receive_stamps);
	u64_of(o, "silences", &l->silences);
	i64_of(o, "longest_silence_ns", &l->longest_silence_ns);
	if (const JsonValue *k = o.get("kvm"); k && k->kind == JsonValue::Obj)
		l->has_kvm = true, read_kvm(*k, &l->kvm);
	if (const JsonValue *r = o.get("refined"); r && r->kind == JsonValue::Obj)
		l->has_refined = true, read_refinement(*r, &l->refined);
	return true;
}

} // namespace

std::string clocks_json(const ClocksFile &f)
{
	std::string o;
	JsonWriter w(o, Style::kLines);
	w.begin_object().key("format").str("strata-clocks").key("version").u64(1);
	w.newline(1).key("machine").str(f.machine).key("boot_id").str(f.boot_id);
	w.key("clock_offset_ns").i64(f.clock_offset_ns);
	w.newline(1).key("links").begin_array();
	for (const ClocksLink &l : f.links) {
		w.newline(2);
		write_link(w, l, 2);
	}
	w.newline(1).end_array();
	if (f.has_ctf) {
		w.newline(1).key("ctf").begin_object().key("link").str(f.ctf.link);
		w.key("rewritten").boolean(f.ctf.rewritten).key("freq").u64(f.ctf.freq);
		w.key("offset_s").i64(f.ctf.offset_s).key("offset").i64(f.ctf.offset).end_object();
	}
	w.newline(0).end_object();
	o += '\n';
	return o;
}

std::string kvm_json(const KvmFacts &k)
{
	std::string o;
	JsonWriter w(o, Style::kLines);
	write_kvm(w, k);
	return o;
}

bool parse_clocks(const std::string &text, ClocksFile *out, std::string *why)
{
	JsonValue root;
	if (!parse_json(text, &root, why))
		return false;
	const JsonValue *links = root.get("links"), *version = root.get("version");
	int64_t v = 0;
	if (root.kind != JsonValue::Obj || !root.get("format") ||
	    !root.get("format")->is_str("strata-clocks") || !version || !version->as_int(&v) || v != 1 ||
	    !links || links->kind != JsonValue::Arr) {
		*why = "not a strata-clocks file of version 1 with links";
		return false;
	}
	*out = ClocksFile();
	str_of(root, "machine", &out->machine);
	str_of(root, "boot_id", &out->boot_id);
	i64_of(root, "clock_offset_ns", &out->clock_offset_ns);
	for (const JsonValue &l : links->arr) {
		out->links.emplace_back();
		if (!read_link(l, &out->links.back(), why))
			return false;
	}
	if (const JsonValue *c = root.get("ctf"); c && c->kind == JsonValue::Obj) {
		out->has_ctf = true;
		str_of(*c, "link", &out->ctf.link);
		bool_of(*c, "rewritten", &out->ctf.rewritten);
		u64_of(*c, "freq", &out->ctf.freq);
		i64_of(*c, "offset_s", &out->ctf.offset_s);
		i64_of(*c, "offset", &out->ctf.offset);
	}
	return true;
}

} // namespace clocksync
} // namespace strata
