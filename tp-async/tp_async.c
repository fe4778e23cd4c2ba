/*
 * tp_async.c - placeholder for issue 3: asynchronous enablement (a running
 * process joins a session started after it, on a signal from the daemon).
 * For now the constructor does nothing; link Strata::tp_sync to trace
 * sessions that are active when the program starts.
 */
static void __attribute__((constructor(110), used)) strata__tp_async_ctor(void)
{
	/* issue 3 */
}
