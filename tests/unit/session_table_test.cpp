// The session table (consumerd/session_table.h) driven in-process, without
// a socket or a daemon: CREATE, rules, START, STOP, DESTROY, ownership by a
// connection, snapshot triggers, names, and the error answers, each with
// its exact status and text.  The daemon over a socket is tested beside
// this (tests/control/).
#include <gtest/gtest.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include <vector>

#include "fs.h"
#include "log.h"
#include "process_registry.h"
#include "proto/proto.h"
#include "session_table.h"
#include "strata_abi.h"

namespace strata {
namespace daemon_impl {
namespace {

// What the table asked of the rest of the daemon.
struct FakeHost : SessionTable::Host {
	int settled = 0, collected = 0, forgot = 0, changes = 0, adopted = 0;
	std::vector<bool> watches;
	void settle() override { settled++; }
	void collect() override { collected++; }
	void forget_drains(const Session &) override { forgot++; }
	void changed() override { changes++; }
	void adopt_early(Session &) override { adopted++; }
	bool watch_triggers(bool on) override
	{
		watches.push_back(on);
		return on;
	}
};

class SessionTableTest : public ::testing::Test {
protected:
	void SetUp() override
	{
		g_quiet = true;
		char tmpl[] = "/tmp/strata-session-table-XXXXXX";
		ASSERT_NE(mkdtemp(tmpl), nullptr);
		dir_ = tmpl;
		table_ = std::make_unique<SessionTable>(
			host_, SessionTable::Config{dir_ + "/sock", "testhost", 100});
	}
	void TearDown() override
	{
		table_.reset();
		std::string cmd = "rm -rf '" + dir_ + "'";
		ASSERT_EQ(system(cmd.c_str()), 0);
	}
	proto::Create create_msg(const std::string &name, uint32_t mode = STRATA_MODE_DISCARD,
				 uint32_t flags = 0)
	{
		proto::Create m;
		m.session = name;
		m.output_dir = out(name);
		m.channel.mode = mode;
		m.flags = flags;
		return m;
	}
	std::string out(const std::string &name) const { return dir_ + "/out-" + name; }
	static proto::Rule rule(const std::string &pattern, bool enable = true)
	{
		proto::Rule r;
		r.pattern = pattern;
		r.enable = enable;
		return r;
	}
	std::string active_file() const
	{
		std::ifstream f(dir_ + "/sock.active");
		std::stringstream ss;
		ss << f.rdbuf();
		return ss.str();
	}
	bool active_file_exists() const { return access((dir_ + "/sock.active").c_str(), F_OK) == 0; }
	proto::SessionState state(const std::string &name)
	{
		Answer err;
		Session *s = table_->find(me_, name, err);
		EXPECT_NE(s, nullptr) << err.text;
		return s ? s->state : proto::SessionState::Created;
	}
	static bool module_loaded() { return access("/dev/strata", F_OK) == 0; }

	FakeHost host_;
	std::string dir_;
	std::unique_ptr<SessionTable> table_;
	const Caller me_{geteuid(), getegid(), 1};
};

TEST_F(SessionTableTest, CreateAnswersTheOutputDirectoryAndMakesIt)
{
	const Answer a = table_->create(me_, create_msg("s"));
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, out("s"));
	EXPECT_FALSE(a.notify);
	struct stat st;
	ASSERT_EQ(stat(out("s").c_str(), &st), 0);
	EXPECT_TRUE(S_ISDIR(st.st_mode));
	EXPECT_EQ(state("s"), proto::SessionState::Created);
	ASSERT_EQ(table_->all().size(), 1u);
	EXPECT_EQ(table_->all()[0]->uid, me_.uid);
	EXPECT_EQ(table_->all()[0]->owner_conn, 0u); // not owned: lives until DESTROY
}

// kCreateTree: the session reaches the caller and its descendants only,
// each process looked up once; a caller whose pid is unknown is refused.
TEST_F(SessionTableTest, CreateTreeReachesTheCallersDescendantsOnly)
{
	EXPECT_EQ(table_->create(me_, create_msg("anon", STRATA_MODE_DISCARD, proto::kCreateTree)).status,
		  -EINVAL);
	const Caller c{geteuid(), getegid(), 2, getpid()};
	ASSERT_EQ(table_->create(c, create_msg("t", STRATA_MODE_DISCARD, proto::kCreateTree)).status, 0);
	const Session &t = *table_->all()[0];
	EXPECT_EQ(t.tree, getpid());
	int fds[2];
	ASSERT_EQ(pipe(fds), 0);
	const pid_t kid = fork();
	if (kid == 0) { // a descendant: waits until the check is done
		char ch;
		close(fds[1]);
		_exit(read(fds[0], &ch, 1) < 0);
	}
	close(fds[0]);
	Proc self, parent, child;
	self.pid = getpid(), parent.pid = getppid(), child.pid = kid;
	self.uid = parent.uid = child.uid = geteuid();
	EXPECT_TRUE(reaches(t, self));
	EXPECT_FALSE(reaches(t, parent));
	EXPECT_TRUE(reaches(t, child));
	EXPECT_TRUE(reaches(t, child)); // from what it remembered
	EXPECT_EQ(child.trees.size(), 1u);
	close(fds[1]);
	int st;
	ASSERT_EQ(waitpid(kid, &st, 0), kid);
	Audience everyone = t;
	everyone.tree = 0;
	EXPECT_TRUE(reaches(everyone, parent));
	// The session's end takes its answers out of the records: its root's
	// pid may come back as another process.
	ProcessRegistry reg([](int) { return true; }, [](int) {});
	Proc &rec = reg.get(getpid(), geteuid());
	EXPECT_TRUE(reaches(t, rec));
	EXPECT_EQ(rec.trees.size(), 1u);
	reg.forget_drains(t);
	EXPECT_TRUE(rec.trees.empty());
}

// A session's output directory that the daemon made and nothing was
// written to goes with the session; one that was there before stays.
TEST_F(SessionTableTest, DestroyRemovesTheEmptyOutputItMade)
{
	ASSERT_EQ(table_->create(me_, create_msg("made")).status, 0);
	ASSERT_EQ(mkdir(out("was").c_str(), 0750), 0);
	ASSERT_EQ(table_->create(me_, create_msg("was")).status, 0);
	EXPECT_EQ(table_->destroy(me_, "made").status, 0);
	EXPECT_EQ(table_->destroy(me_, "was").status, 0);
	EXPECT_NE(access(out("made").c_str(), F_OK), 0);
	EXPECT_EQ(access(out("was").c_str(), F_OK), 0);
}

TEST_F(SessionTableTest, CreateRefusesATakenName)
{
	ASSERT_EQ(table_->create(me_, create_msg("s")).status, 0);
	const Answer a = table_->create(me_, create_msg("s"));
	EXPECT_EQ(a.status, -EEXIST);
	EXPECT_EQ(a.text, "a session named 's' already exists");
	EXPECT_EQ(table_->all().size(), 1u);
}

// docs/security.md: on a root daemon a user holds at most 4 slots and
// users together 12; names are per user; kernel: rules are root's.
TEST_F(SessionTableTest, UsersShareTheSlotsAndRootKeepsFour)
{
	if (geteuid() != 0 || module_loaded())
		GTEST_SKIP() << "needs root (a daemon that serves every user) and no kernel module";
	ASSERT_EQ(chmod(dir_.c_str(), 0755), 0);
	auto create_as = [&](uid_t uid, const std::string &name) {
		const std::string home = dir_ + "/home-" + std::to_string(uid);
		if (access(home.c_str(), F_OK) != 0 &&
		    (mkdir(home.c_str(), 0700) != 0 || chown(home.c_str(), uid, uid) != 0))
			return Answer{};
		proto::Create m = create_msg(name);
		m.output_dir = home + "/" + name;
		return table_->create(Caller{uid, uid, 2}, m);
	};
	for (uid_t u = 40001; u <= 40003; u++) {
		for (int i = 0; i < 4; i++)
			ASSERT_EQ(create_as(u, "s" + std::to_string(i)).status, 0) << u << " " << i;
		const Answer a = create_as(u, "s4");
		EXPECT_EQ(a.status, -EDQUOT);
		EXPECT_EQ(a.text,
			  "you hold 4 sessions, a user's share of this daemon's 16 slots; destroy one first");
	}
	const Answer a = create_as(40004, "s0");
	EXPECT_EQ(a.status, -EDQUOT);
	EXPECT_EQ(a.text,
		  "users hold 12 of the 16 session slots (this daemon's and the kernel module's), the rest "
		  "is kept for root");
	for (int i = 0; i < 4; i++) // root: the 4 left, and names the users use
		EXPECT_EQ(table_->create(me_, create_msg("s" + std::to_string(i))).status, 0);
	EXPECT_EQ(table_->create(me_, create_msg("root5")).status, -ENOSPC);
	const Answer k = table_->rule(Caller{40001, 40001, 2}, "s0", rule("kernel:sched_switch"));
	EXPECT_EQ(k.status, -EPERM);
	EXPECT_EQ(table_->rule(me_, "s0", rule("kernel:sched_switch")).status, 0);
}

TEST_F(SessionTableTest, SixteenSlotsThenNoSpace)
{
	if (module_loaded())
		GTEST_SKIP() << "a kernel module is loaded: its slots are shared with other daemons";
	for (uint32_t i = 0; i < proto::kMaxSlots; i++) {
		ASSERT_EQ(table_->create(me_, create_msg("s" + std::to_string(i))).status, 0);
		EXPECT_EQ(table_->all()[i]->slot, i);
	}
	const Answer a = table_->create(me_, create_msg("one-more"));
	EXPECT_EQ(a.status, -ENOSPC);
	EXPECT_EQ(a.text, "all 16 session slots are in use");
	// A destroyed session's slot is free again.
	ASSERT_EQ(table_->destroy(me_, "s3").status, 0);
	ASSERT_EQ(table_->create(me_, create_msg("again")).status, 0);
	EXPECT_EQ(table_->all().back()->slot, 3u);
}

TEST_F(SessionTableTest, NamesAreCheckedByTheDecoderBeforeTheTable)
{
	// A session name the protocol refuses never reaches the table: the
	// decoder answers the error (connections.cpp replies -EPROTO with its text).
	proto::Message m;
	m.seq = 1;
	m.version = proto::kVersion;
	m.body = create_msg("../escape");
	const std::vector<uint8_t> bytes = proto::encode(m);
	proto::Message back;
	const proto::DecodeResult d = proto::decode(bytes.data(), bytes.size(), back);
	EXPECT_FALSE(d);
	EXPECT_EQ(d.text, "create: invalid session name");
	EXPECT_FALSE(proto::valid_session_name(""));
	EXPECT_TRUE(proto::valid_session_name("good-name_1"));
	// Unknown and hidden names: a trigger's companion is never found.
	Answer err;
	EXPECT_EQ(table_->find(me_, "nobody", err), nullptr);
	EXPECT_EQ(err.status, -ENOENT);
	EXPECT_EQ(err.text, "no session named 'nobody'");
}

TEST_F(SessionTableTest, RulesBeforeStartAreAnsweredWithoutSignals)
{
	ASSERT_EQ(table_->create(me_, create_msg("s")).status, 0);
	Answer a = table_->rule(me_, "s", rule("app:*"));
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, "enabled app:* in session 's'");
	EXPECT_FALSE(a.notify);
	a = table_->rule(me_, "s", rule("app:noisy", false));
	EXPECT_EQ(a.text, "disabled app:noisy in session 's'");
	a = table_->rule(me_, "s", rule("app:one"), Target{{42}, {}});
	EXPECT_EQ(a.text, "enabled app:one in session 's' for the chosen processes");
	ASSERT_EQ(table_->all()[0]->rules.size(), 3u);
	EXPECT_EQ(table_->all()[0]->targets.size(), 3u);
	EXPECT_EQ(table_->all()[0]->targets[2].pids, std::vector<uint32_t>{42});
	// A rule that matches exactly what an earlier one matches replaces it.
	a = table_->rule(me_, "s", rule("app:*", false));
	ASSERT_EQ(table_->all()[0]->rules.size(), 3u);
	EXPECT_EQ(table_->all()[0]->rules.back().pattern, "app:*");
	EXPECT_EQ(table_->all()[0]->rules.back().enable, 0u);
}

TEST_F(SessionTableTest, ThirtyTwoRulesThenNoSpace)
{
	ASSERT_EQ(table_->create(me_, create_msg("s")).status, 0);
	for (uint32_t i = 0; i < proto::kMaxRules; i++)
		ASSERT_EQ(table_->rule(me_, "s", rule("p:e" + std::to_string(i))).status, 0);
	const Answer a = table_->rule(me_, "s", rule("p:more"));
	EXPECT_EQ(a.status, -ENOSPC);
	EXPECT_EQ(a.text, "session 's' already has 32 rules");
	EXPECT_EQ(table_->all()[0]->rules.size(), proto::kMaxRules);
}

TEST_F(SessionTableTest, StartStopDestroy)
{
	ASSERT_EQ(table_->create(me_, create_msg("s")).status, 0);
	ASSERT_EQ(table_->rule(me_, "s", rule("app:*")).status, 0);
	EXPECT_FALSE(active_file_exists());

	Answer a = table_->start(me_, "s");
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, "session 's' started");
	EXPECT_TRUE(a.notify); // running processes are told
	EXPECT_EQ(a.rule, -1);
	EXPECT_EQ(a.who.uid, me_.uid);
	ASSERT_EQ(a.who.rules.size(), 1u);
	EXPECT_EQ(a.who.rules[0].pattern, "app:*");
	EXPECT_EQ(host_.adopted, 1);
	EXPECT_EQ(state("s"), proto::SessionState::Active);
	EXPECT_EQ(table_->all()[0]->run_id, 100u); // the configured first run id
	EXPECT_EQ(active_file(), out("s") + "\n");
	EXPECT_EQ(table_->by_run(100), table_->all()[0].get());

	a = table_->start(me_, "s");
	EXPECT_EQ(a.status, -EALREADY);
	EXPECT_EQ(a.text, "session 's' is already started");
	EXPECT_FALSE(a.notify);

	// A rule while active reaches the processes that rule targets.
	a = table_->rule(me_, "s", rule("app:late"));
	EXPECT_EQ(a.status, 0);
	EXPECT_TRUE(a.notify);
	EXPECT_EQ(a.rule, 1);

	const int settled = host_.settled;
	a = table_->stop(me_, "s");
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, "session 's' stopped; trace in " + out("s"));
	EXPECT_TRUE(a.notify);
	EXPECT_EQ(host_.settled, settled + 1); // buffers already sent joined first
	EXPECT_EQ(state("s"), proto::SessionState::Stopped);
	EXPECT_FALSE(active_file_exists());

	a = table_->stop(me_, "s");
	EXPECT_EQ(a.status, -EALREADY);
	EXPECT_EQ(a.text, "session 's' is not started");

	// Restarted: a new run id.
	ASSERT_EQ(table_->start(me_, "s").status, 0);
	EXPECT_EQ(table_->all()[0]->run_id, 101u);
	a = table_->destroy(me_, "s");
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, "session 's' destroyed; trace in " + out("s"));
	EXPECT_TRUE(a.notify); // it was active: its processes close their slot
	EXPECT_EQ(host_.forgot, 1);
	EXPECT_TRUE(table_->all().empty());
	EXPECT_FALSE(active_file_exists());
	Answer err;
	EXPECT_EQ(table_->find(me_, "s", err), nullptr);
	EXPECT_EQ(err.status, -ENOENT);
}

// A stop in two phases (stopping.h): between them the session is still
// active (STATUS, its drains, the .active file) but takes no change that
// would reach processes; the second phase answers as STOP (or DESTROY).
TEST_F(SessionTableTest, ATwoPhaseStopTellsFirstThenFinishes)
{
	ASSERT_EQ(table_->create(me_, create_msg("s")).status, 0);
	ASSERT_EQ(table_->start(me_, "s").status, 0);
	Session &s = *table_->all()[0];
	const int settled = host_.settled;
	Answer a = table_->begin_stop(s);
	EXPECT_TRUE(a.notify); // its processes are told now
	EXPECT_EQ(a.who.uid, s.uid);
	EXPECT_EQ(host_.settled, settled + 1); // buffers already sent joined first
	EXPECT_TRUE(s.stopping);
	EXPECT_EQ(state("s"), proto::SessionState::Active);
	EXPECT_EQ(active_file(), out("s") + "\n");
	EXPECT_FALSE(table_->begin_stop(s).notify); // once

	a = table_->rule(me_, "s", rule("app:late")); // kept for a restart, nobody told
	EXPECT_EQ(a.status, 0);
	EXPECT_FALSE(a.notify);
	a = table_->start(me_, "s");
	EXPECT_EQ(a.status, -EBUSY);

	a = table_->finish_stop(s.id, false);
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, "session 's' stopped; trace in " + out("s"));
	EXPECT_FALSE(a.notify);                // told already
	EXPECT_EQ(host_.settled, settled + 2); // and what they sent meanwhile
	EXPECT_EQ(state("s"), proto::SessionState::Stopped);
	EXPECT_FALSE(table_->all()[0]->stopping);
	EXPECT_FALSE(active_file_exists());

	// Restarted, then destroyed in two phases.
	ASSERT_EQ(table_->start(me_, "s").status, 0);
	EXPECT_EQ(table_->all()[0]->rules.size(), 1u); // app:late
	EXPECT_TRUE(table_->begin_stop(*table_->all()[0]).notify);
	a = table_->finish_stop(table_->all()[0]->id, true);
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, "session 's' destroyed; trace in " + out("s"));
	EXPECT_FALSE(a.notify);
	EXPECT_TRUE(table_->all().empty());
	EXPECT_EQ(table_->finish_stop(1, false).status, -ENOENT);
}

TEST_F(SessionTableTest, DestroyingAStoppedSessionSignalsNobody)
{
	ASSERT_EQ(table_->create(me_, create_msg("s")).status, 0);
	const Answer a = table_->destroy(me_, "s");
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, "session 's' destroyed; trace in " + out("s"));
	EXPECT_FALSE(a.notify);
}

TEST_F(SessionTableTest, AnotherUsersSessionIsNeitherSeenNorTouched)
{
	ASSERT_EQ(table_->create(me_, create_msg("s")).status, 0);
	const Caller other{me_.uid + 1234, me_.gid, 2};
	for (Answer a : {table_->start(other, "s"), table_->stop(other, "s"), table_->destroy(other, "s"),
			 table_->rule(other, "s", rule("x:*"))}) {
		// Not revealed: the answer for a name that does not exist.
		EXPECT_EQ(a.status, -ENOENT);
		EXPECT_EQ(a.text, "no session named 's'");
	}
	proto::StatusReply sr;
	Answer err;
	EXPECT_TRUE(table_->status(other, "", sr, err));
	EXPECT_TRUE(sr.sessions.empty());
	EXPECT_FALSE(table_->status(other, "s", sr, err));
	EXPECT_EQ(err.status, -ENOENT);
	// Its owner sees it.
	EXPECT_TRUE(table_->status(me_, "s", sr, err));
	ASSERT_EQ(sr.sessions.size(), 1u);
	EXPECT_EQ(sr.sessions[0].name, "s");
	EXPECT_EQ(sr.sessions[0].output_dir, out("s"));
	EXPECT_EQ(sr.sessions[0].state, static_cast<uint32_t>(proto::SessionState::Created));
	EXPECT_EQ(sr.sessions[0].n_buffers, 0u);
}

TEST_F(SessionTableTest, ARootDaemonWritesForAUserOnlyInsideTheirDirectory)
{
	if (geteuid() != 0)
		GTEST_SKIP() << "needs a root daemon";
	const Caller user{4321, 4321, 3};
	Answer a = table_->create(user, create_msg("u"));
	EXPECT_EQ(a.status, -EACCES);
	EXPECT_EQ(a.text, "the output directory must be inside a directory you own (" + dir_ + " is not)");
	EXPECT_TRUE(table_->all().empty());
	// The daemon writes with the user's rights (AsOwner): the user must
	// be able to reach its directory, as a home under /home.
	ASSERT_EQ(chmod(dir_.c_str(), 0711), 0);
	const std::string home = dir_ + "/home";
	ASSERT_EQ(mkdir(home.c_str(), 0700), 0);
	ASSERT_EQ(chown(home.c_str(), 4321, 4321), 0);
	proto::Create m = create_msg("u");
	m.output_dir = home + "/trace";
	a = table_->create(user, m);
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, home + "/trace");
	struct stat st;
	ASSERT_EQ(stat((home + "/trace").c_str(), &st), 0);
	EXPECT_EQ(st.st_uid, 4321u); // the directory is the user's
	// The user swaps it for a link to a directory of root's after the
	// check: what the daemon makes there later (a sub-trace) fails, as
	// the user's own mkdir would, and nothing appears in root's.
	const std::string roots = dir_ + "/roots";
	ASSERT_EQ(mkdir(roots.c_str(), 0755), 0);
	ASSERT_EQ(rename((home + "/trace").c_str(), (home + "/old").c_str()), 0);
	ASSERT_EQ(symlink(roots.c_str(), (home + "/trace").c_str()), 0);
	EXPECT_EQ(make_dirs(home + "/trace/ust/pid/p-1", 0750, table_->all()[0]->owner), -EACCES);
	EXPECT_NE(stat((roots + "/ust").c_str(), &st), 0);
	ASSERT_EQ(stat((home + "/old").c_str(), &st), 0);
	// The thread's identity came back: root writes in root's directory.
	EXPECT_EQ(mkdir((roots + "/mine").c_str(), 0700), 0);
}

TEST_F(SessionTableTest, AnOwnedSessionEndsWithItsConnection)
{
	const Caller record{me_.uid, me_.gid, 7};
	ASSERT_EQ(
		table_->create(record, create_msg("owned", STRATA_MODE_DISCARD, proto::kCreateOwned)).status,
		0);
	ASSERT_EQ(table_->create(record, create_msg("kept")).status, 0);
	ASSERT_EQ(table_->start(record, "owned").status, 0);
	EXPECT_TRUE(table_->end_owned(8, 1).empty()); // another connection closed
	EXPECT_EQ(table_->all().size(), 2u);

	std::vector<Answer> ended = table_->end_owned(7, 1);
	ASSERT_EQ(ended.size(), 1u);
	EXPECT_EQ(ended[0].text, "session 'owned' destroyed; trace in " + out("owned"));
	EXPECT_TRUE(ended[0].notify); // it was active: its processes are told
	ASSERT_EQ(table_->all().size(), 1u);
	EXPECT_EQ(table_->all()[0]->name, "kept"); // not owned: lives until DESTROY
	EXPECT_FALSE(active_file_exists());
	EXPECT_TRUE(table_->end_owned(7, 1).empty());
}

TEST_F(SessionTableTest, TriggersNeedOverwriteMode)
{
	ASSERT_EQ(table_->create(me_, create_msg("disk")).status, 0);
	proto::SnapshotOn on;
	on.session = "disk";
	on.pattern = "app:crash";
	const Answer a = table_->snapshot_on(me_, on);
	EXPECT_EQ(a.status, -EINVAL);
	EXPECT_EQ(a.text, "session 'disk' is not in overwrite mode: its trace is on disk already");
	proto::Snapshot snap;
	snap.session = "disk";
	const Answer s = table_->snapshot(me_, snap);
	EXPECT_EQ(s.status, -EALREADY);
	EXPECT_EQ(s.text, "session 'disk' is not started: nothing to snapshot");
}

TEST_F(SessionTableTest, ATriggerRunsACompanionWhileTheSessionIsActive)
{
	if (module_loaded())
		GTEST_SKIP() << "a kernel module is loaded: its slots are shared with other daemons";
	ASSERT_EQ(table_->create(me_, create_msg("fr", STRATA_MODE_OVERWRITE)).status, 0);
	proto::SnapshotOn on;
	on.session = "fr";
	on.pattern = "app:crash";
	on.holdoff_ms = 500;
	Answer a = table_->snapshot_on(me_, on);
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text,
		  "session 'fr' takes a snapshot when app:crash is recorded (at most one per 500 ms) in " +
			  out("fr") + "-snapshot-<UTC time>, once started");
	EXPECT_FALSE(a.notify);
	EXPECT_TRUE(host_.watches.empty());

	a = table_->start(me_, "fr");
	EXPECT_EQ(a.text, "session 'fr' started");
	ASSERT_EQ(table_->all().size(), 2u); // the hidden companion
	const Session &comp = *table_->all()[1];
	EXPECT_EQ(comp.name, "fr/trigger");
	EXPECT_EQ(comp.companion_of, table_->all()[0]->id);
	EXPECT_EQ(comp.slot, 1u); // above the session's
	EXPECT_EQ(comp.state, proto::SessionState::Active);
	ASSERT_EQ(comp.rules.size(), 1u);
	EXPECT_EQ(comp.rules[0].pattern, "app:crash");
	EXPECT_EQ(comp.channel.mode, static_cast<uint32_t>(STRATA_MODE_OVERWRITE));
	EXPECT_EQ(host_.watches, std::vector<bool>{true});
	// Never named by a controller, never in STATUS.
	Answer err;
	EXPECT_EQ(table_->find(me_, "fr/trigger", err), nullptr);
	EXPECT_EQ(err.status, -ENOENT);
	proto::StatusReply sr;
	EXPECT_TRUE(table_->status(me_, "", sr, err));
	EXPECT_EQ(sr.sessions.size(), 1u);

	// A look that finds nothing recorded takes no snapshot.
	table_->check_triggers();
	EXPECT_EQ(access((out("fr") + "-triggers").c_str(), F_OK), 0);

	a = table_->stop(me_, "fr");
	EXPECT_EQ(a.text,
		  "session 'fr' stopped; trace in " + out("fr") + "; snapshots on app:crash: 0 taken");
	ASSERT_EQ(table_->all().size(), 1u); // the companion went with the stop
	// Nothing left to watch: the timer stops at the next look.
	table_->check_triggers();
	EXPECT_EQ(host_.watches, (std::vector<bool>{true, false}));

	// In two phases (stopping.h): the companion is told with the session,
	// and stops (after a last look) with its second phase.
	ASSERT_EQ(table_->start(me_, "fr").status, 0);
	ASSERT_EQ(table_->all().size(), 2u);
	a = table_->begin_stop(*table_->all()[0]);
	EXPECT_TRUE(a.notify);
	ASSERT_EQ(a.also.size(), 1u);
	EXPECT_EQ(a.also[0].first.rules.size(), 1u);
	EXPECT_EQ(a.also[0].first.rules[0].pattern, "app:crash");
	ASSERT_EQ(table_->all().size(), 2u);
	EXPECT_TRUE(table_->all()[1]->stopping);
	a = table_->finish_stop(table_->all()[0]->id, false);
	EXPECT_EQ(a.text,
		  "session 'fr' stopped; trace in " + out("fr") + "; snapshots on app:crash: 0 taken");
	ASSERT_EQ(table_->all().size(), 1u);

	on.off = 1;
	a = table_->snapshot_on(me_, on);
	EXPECT_EQ(a.status, 0);
	EXPECT_EQ(a.text, "session 'fr' takes no more snapshots on an event");
	a = table_->snapshot_on(me_, on);
	EXPECT_EQ(a.text, "session 'fr' had no snapshot trigger");
}

TEST_F(SessionTableTest, ShutdownStopsEverySession)
{
	ASSERT_EQ(table_->create(me_, create_msg("a")).status, 0);
	ASSERT_EQ(table_->create(me_, create_msg("b")).status, 0);
	ASSERT_EQ(table_->start(me_, "a").status, 0);
	ASSERT_EQ(table_->start(me_, "b").status, 0);
	EXPECT_EQ(active_file(), out("a") + "\n" + out("b") + "\n");
	table_->stop_all();
	EXPECT_TRUE(table_->all().empty());
	EXPECT_FALSE(active_file_exists());
}

} // namespace
} // namespace daemon_impl
} // namespace strata
