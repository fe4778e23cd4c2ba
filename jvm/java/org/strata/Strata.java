/*
 * Strata.java - the Java API: declare typed events at run time, check them
 * without crossing JNI, emit them with one JNI call.
 *
 *     Strata.Event step = Strata.declare("app", "step", Strata.INFO,
 *         new String[] {"count", "what"},
 *         new Strata.Kind[] {Strata.Kind.LONG, Strata.Kind.STRING});
 *     if (step.isEnabled())
 *         step.emit(42L, "hello");
 *
 * The native side is libstrata-jvm.so (also the JVMTI agent): the system
 * property strata.jvm.library names it (strata record --jvm sets it), else
 * System.loadLibrary("strata-jvm") finds it on java.library.path.
 */
package org.strata;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

public final class Strata {
    /** Field kinds: INT (4 bytes), LONG (8), DOUBLE, BOOLEAN, STRING. */
    public enum Kind { INT, LONG, DOUBLE, BOOLEAN, STRING }

    /** Log levels, as syslog (lower is more severe). */
    public static final int EMERG = 0, ALERT = 1, CRIT = 2, ERR = 3, WARNING = 4, NOTICE = 5,
            INFO = 6, DEBUG = 7;

    // The enabled check reads the event's state word where the runtime
    // keeps it: with sun.misc.Unsafe a volatile load at its address (on
    // x86-64 one plain load the JIT may not hoist out of a loop), else an
    // opaque VarHandle read through a direct buffer over it (the same
    // load, plus the buffer's bounds and liveness checks).
    private static final VarHandle STATE =
            MethodHandles.byteBufferViewVarHandle(int[].class, ByteOrder.nativeOrder());
    private static final sun.misc.Unsafe UNSAFE = unsafe();

    private static sun.misc.Unsafe unsafe() {
        try {
            java.lang.reflect.Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            return (sun.misc.Unsafe) f.get(null);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    static {
        String lib = System.getProperty("strata.jvm.library");
        if (lib != null && !lib.isEmpty())
            System.load(lib);
        else
            System.loadLibrary("strata-jvm");
    }

    private Strata() {}

    /** One declared event. */
    public static final class Event {
        private final long handle;
        private final ByteBuffer state;
        private final long stateAddress; // the state word (Unsafe path), 0 if none
        private final Kind[] kinds;

        private Event(long handle, ByteBuffer state, long stateAddress, Kind[] kinds) {
            this.handle = handle;
            this.state = state;
            this.stateAddress = stateAddress;
            this.kinds = kinds;
        }

        /** Whether any session records this event (no JNI call). */
        public boolean isEnabled() {
            if (stateAddress != 0)
                return UNSAFE.getIntVolatile(null, stateAddress) != 0;
            return (int) STATE.getOpaque(state, 0) != 0;
        }

        /**
         * Records the event in every session that enables it: one value
         * per field, of its kind (a Number for INT, LONG and DOUBLE, a
         * Boolean, a String or null).
         */
        public void emit(Object... values) {
            if (!isEnabled())
                return;
            if (values.length != kinds.length)
                throw new IllegalArgumentException("strata: " + kinds.length + " values expected, got "
                        + values.length);
            long[] nums = new long[kinds.length];
            String[] strs = null;
            for (int i = 0; i < kinds.length; i++) {
                Object v = values[i];
                switch (kinds[i]) {
                case INT: nums[i] = ((Number) v).intValue(); break;
                case LONG: nums[i] = ((Number) v).longValue(); break;
                case DOUBLE: nums[i] = Double.doubleToRawLongBits(((Number) v).doubleValue()); break;
                case BOOLEAN: nums[i] = ((Boolean) v) ? 1 : 0; break;
                default:
                    if (strs == null)
                        strs = new String[kinds.length];
                    strs[i] = v == null ? null : v.toString();
                }
            }
            emit0(handle, nums, strs);
        }

        /** Drops this declaration (the last one switches the event off). */
        public void release() {
            release0(handle);
        }
    }

    /**
     * Declares provider:name with the given fields.  The same name and
     * fields again return an event on the same tracepoint; bad
     * declarations throw IllegalArgumentException with the reason.
     */
    public static Event declare(String provider, String name, int logLevel, String[] fieldNames,
            Kind[] kinds) {
        if (fieldNames.length != kinds.length)
            throw new IllegalArgumentException("strata: one kind per field name");
        int[] k = new int[kinds.length];
        for (int i = 0; i < kinds.length; i++)
            k[i] = kinds[i].ordinal();
        long h = declare0(provider, name, logLevel, fieldNames, k);
        if (h <= 0)
            throw new IllegalArgumentException("strata: " + provider + ":" + name + ": "
                    + error0((int) h));
        ByteBuffer state = stateBuffer0(h).order(ByteOrder.nativeOrder());
        return new Event(h, state, UNSAFE != null ? stateAddress0(h) : 0, kinds.clone());
    }

    private static native long declare0(String provider, String name, int level, String[] names,
            int[] kinds);
    private static native String error0(int code);
    private static native ByteBuffer stateBuffer0(long handle);
    private static native long stateAddress0(long handle);
    private static native void emit0(long handle, long[] nums, String[] strs);
    private static native void release0(long handle);
}
