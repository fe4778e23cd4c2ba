package strata;

import java.lang.invoke.MethodHandles;
import java.lang.invoke.VarHandle;
import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * An event declared at run time by Java code, recorded by Strata into the
 * same buffers and clock as every other event (docs/jvm.md).
 *
 * <pre>
 * static final Event STEP = Event.declare("app", "step", Event.INFO,
 *         Event.field("count", Event.Type.INT), Event.field("what", Event.Type.STRING));
 * ...
 * if (STEP.enabled())                       // no JNI: reads the state word
 *     STEP.record().putInt(42).putString("hello").emit();   // one JNI call
 * </pre>
 *
 * Without libstrata-jvm.so (no -agentpath, no strata.jvm.library property)
 * every event is declared but never enabled, and nothing is recorded.
 */
public final class Event {
    public static final int EMERG = 0, ALERT = 1, CRIT = 2, ERR = 3, WARNING = 4, NOTICE = 5,
            INFO = 6, DEBUG = 7;

    /** Field types; their numbers are the natives' encoding (java_api.cpp). */
    public enum Type { INT, LONG, DOUBLE, BOOLEAN, STRING }

    /** One field: a name ([A-Za-z_][A-Za-z0-9_]*) and a type. */
    public static final class Field {
        final String name;
        final Type type;

        Field(String name, Type type) {
            this.name = name;
            this.type = type;
        }
    }

    public static Field field(String name, Type type) {
        return new Field(name, type);
    }

    // The state word, read without JNI in a way the JIT may not hoist out of
    // a loop: sun.misc.Unsafe's volatile read at its address (on x86 a plain
    // load, about 0.4 ns) where the JDK offers it without a warning (up to
    // 22), else an opaque read through a direct ByteBuffer (about 1.5 ns:
    // bounds and scope checks).
    private static final VarHandle STATE =
            MethodHandles.byteBufferViewVarHandle(int[].class, ByteOrder.nativeOrder());
    static final sun.misc.Unsafe UNSAFE = unsafe(); // null: not offered (Record.java uses it too)
    static final boolean NATIVE = loadNatives();

    private static sun.misc.Unsafe unsafe() {
        if (Runtime.version().feature() > 22 || Boolean.getBoolean("strata.no_unsafe"))
            return null;
        try {
            java.lang.reflect.Field f = sun.misc.Unsafe.class.getDeclaredField("theUnsafe");
            f.setAccessible(true);
            return (sun.misc.Unsafe) f.get(null);
        } catch (ReflectiveOperationException | RuntimeException e) {
            return null;
        }
    }

    private static boolean loadNatives() {
        try {
            return available0(); // the agent's library, if -agentpath loaded it
        } catch (UnsatisfiedLinkError e) {
            // not loaded as an agent: try the library named explicitly
        }
        String lib = System.getProperty("strata.jvm.library", System.getenv("STRATA_JVM_LIBRARY"));
        if (lib == null || lib.isEmpty())
            return false;
        try {
            System.load(lib);
            return available0();
        } catch (UnsatisfiedLinkError e) {
            System.err.println("strata: cannot load " + lib + ": " + e.getMessage());
            return false;
        }
    }

    final long handle; // native Decl*, 0 without natives
    final Type[] types;
    private final ByteBuffer state;
    private final long stateAddress; // 0: read through `state`
    private final String fullName;
    private final ThreadLocal<Record> records;

    private Event(long handle, ByteBuffer state, Type[] types, String fullName) {
        this.handle = handle;
        this.state = state;
        this.stateAddress = handle != 0 && UNSAFE != null ? stateAddress0(handle) : 0;
        this.types = types;
        this.fullName = fullName;
        this.records = ThreadLocal.withInitial(() -> new Record(this));
    }

    /**
     * Declares provider:name with up to 16 fields.  Declaring the same event
     * again with the same log level and fields returns an event sharing its
     * state; with other fields it throws IllegalArgumentException.
     */
    public static Event declare(String provider, String name, int loglevel, Field... fields) {
        Type[] types = new Type[fields.length];
        String[] names = new String[fields.length];
        int[] kinds = new int[fields.length];
        for (int i = 0; i < fields.length; i++) {
            types[i] = fields[i].type;
            names[i] = fields[i].name;
            kinds[i] = fields[i].type.ordinal();
        }
        String full = provider + ":" + name;
        if (!NATIVE)
            return new Event(0, ByteBuffer.allocateDirect(4), types, full);
        long h = declare0(provider, name, loglevel, names, kinds);
        if (h < 0)
            throw new IllegalArgumentException(full + ": " + strerror0((int) h));
        ByteBuffer st = state0(h).order(ByteOrder.nativeOrder());
        return new Event(h, st, types, full);
    }

    /** Whether some session records the event: one load, no JNI. */
    public boolean enabled() {
        if (stateAddress != 0)
            return UNSAFE.getIntVolatile(null, stateAddress) != 0;
        return (int) STATE.getOpaque(state, 0) != 0;
    }

    // The record of the first thread that emitted the event: that thread
    // finds it without the ThreadLocal lookup (about 3 ns).  Read and
    // written with plain accesses: a Record is immutable but for fields only
    // its owner touches, and its final `owner` is seen initialised by any
    // thread that sees the reference (final-field semantics), so another
    // thread compares owners and takes the ThreadLocal.  Written once: no
    // cache line bounces between emitting threads.
    private Record first;

    /** This thread's record for the event, emptied; fill every field in order, then emit(). */
    public Record record() {
        Record r = first;
        if (r == null || r.owner != Thread.currentThread())
            r = threadRecord();
        r.reset();
        return r;
    }

    private Record threadRecord() {
        Record r = records.get();
        if (first == null)
            first = r;
        return r;
    }

    @Override
    public String toString() {
        return fullName;
    }

    static native boolean available0();

    static native long declare0(String provider, String name, int loglevel, String[] names, int[] kinds);

    static native String strerror0(int err);

    static native ByteBuffer state0(long handle);

    static native long stateAddress0(long handle);

    static native ByteBuffer buffer0(int size);

    static native long address0(ByteBuffer buf);

    static native void emit0(long handle, long address, int len);
}
