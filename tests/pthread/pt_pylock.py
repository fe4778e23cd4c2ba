#!/usr/bin/python3
"""A CPython program with known threading.Lock contention, for
check_pthread.py's `pylock` scenario (docs/pthread.md, semaphores).

usage: pt_pylock.py OUT.json ROUNDS N

CPython's threading.Lock is a POSIX semaphore (sem_t); Lock.acquire() first
tries without releasing the GIL (sem_trywait), then blocks (sem_wait).
Each of ROUNDS rounds: the main thread holds the lock, starts a thread that
acquires and releases it, waits until that thread is blocked in the
kernel on the semaphore's futex (read from /proc, no sleep), then releases
it.  Then N uncontended acquisitions by the main thread.  For the lock:
    acquisitions  2 * ROUNDS + N   (sem_trywait successes + sem_waits)
    contended     ROUNDS           (each thread's sem_wait blocked)
    failed        ROUNDS           (each thread's first sem_trywait: EAGAIN)
    holds         2 * ROUNDS + N   (every release by the acquiring thread)
"""
import ctypes
import json
import os
import sys
import threading

FUTEX = 202  # x86_64


def main():
    out, rounds, n = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    # A semaphore at an address no earlier lock used (the start-up's import
    # locks come and go, and the analysis knows a lock by its address):
    # 2000 locks kept alive first take every freed chunk of its size.
    keep = [threading.Lock() for _ in range(2000)]
    lock = threading.Lock()
    # lockobject: PyObject_HEAD (16 bytes), then the PyThread_type_lock
    # (a sem_t *; its futex word is at its start).
    sem = ctypes.c_void_p.from_address(id(lock) + 16).value

    def blocked(tid):
        try:
            with open("/proc/self/task/%d/syscall" % tid) as f:
                parts = f.read().split()
        except OSError:
            return False
        return len(parts) > 1 and parts[0] == str(FUTEX) and int(parts[1], 16) == sem

    def take():
        with lock:
            pass

    for _ in range(rounds):
        lock.acquire()
        t = threading.Thread(target=take)
        t.start()
        while not blocked(t.native_id):
            pass
        lock.release()
        t.join()
    for _ in range(n):
        with lock:
            pass
    del keep
    with open(out, "w") as f:
        json.dump({"pid": os.getpid(), "lock": hex(sem), "acq": 2 * rounds + n, "contended": rounds,
                   "failed": rounds, "holds": 2 * rounds + n}, f)


if __name__ == "__main__":
    main()
