/*
 * stage2.h - how the VM boot tests' PID 1 programs hand the rest of the boot
 * to /stage2 (run-vm.sh --init): a child runs `busybox sh /stage2` with fd 5
 * the write end of `go` (stage2 -> init: "the session started") and fd 6 the
 * read end of `done` (init -> stage2: the emitted counts).  Returns the
 * parent's ends in go_rd and done_wr, or -1.
 */
#ifndef STRATA_TESTS_BOOT_STAGE2_H
#define STRATA_TESTS_BOOT_STAGE2_H

#include <fcntl.h>
#include <unistd.h>

static int start_stage2(int *go_rd, int *done_wr)
{
	int go[2], done[2];
	if (pipe(go) != 0 || pipe(done) != 0)
		return -1;
	pid_t stage2 = fork();
	if (stage2 < 0)
		return -1;
	if (stage2 == 0) {
		/* Move the ends above 9 first: the pipes may already sit on 5 or 6. */
		const int g = fcntl(go[1], F_DUPFD, 10), d = fcntl(done[0], F_DUPFD, 10);
		close(go[0]);
		close(go[1]);
		close(done[0]);
		close(done[1]);
		if (g < 0 || d < 0 || dup2(g, 5) < 0 || dup2(d, 6) < 0)
			_exit(127);
		close(g);
		close(d);
		execl("/bin/busybox", "sh", "/stage2", (char *)NULL);
		_exit(127);
	}
	close(go[1]);
	close(done[0]);
	*go_rd = go[0];
	*done_wr = done[1];
	return 0;
}

#endif
