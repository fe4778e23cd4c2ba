package strata;

import java.nio.ByteBuffer;
import java.nio.ByteOrder;

/**
 * The arguments of one emission of an Event, written in field order into a
 * per-thread buffer in native memory, already laid out as the trace stores
 * the event's payload: the native side checks that layout and copies it into
 * the ring buffer as it is (java_api.cpp, strata_dyn_emit_packed): one JNI
 * call per emitted event, no decoding, no allocation (but for a non-ASCII
 * string).  Not shared between threads.
 *
 * Layout: byte-packed, native byte order; INT 4 bytes, LONG 8, BOOLEAN 1
 * (0 or 1), DOUBLE 8 (the raw bits), STRING its UTF-8 bytes and a NUL
 * (null is recorded as "(null)"; a string stops at its first U+0000, and
 * one that does not fit the buffer is truncated at a character boundary).
 *
 * The bytes are written with sun.misc.Unsafe at the buffer's address where
 * Event reads the state word that way (no bounds or scope check per byte:
 * the bounds are checked here, once per field), else with absolute puts on
 * the direct ByteBuffer.
 *
 * Room: with L fields left to write (this one included), pos <= SIZE - 8 L
 * holds before each field.  A scalar takes at most 8 bytes; a string's room
 * leaves 8 bytes for each later field (its NUL takes 1), so the invariant
 * holds after it too, whatever the later fields are.
 */
public final class Record {
    static final int SIZE = 16384;

    private static final sun.misc.Unsafe U = Event.UNSAFE;

    private final Event event;
    final Thread owner; // the thread whose record this is (Event.record)
    private final Event.Type[] types;
    private final ByteBuffer buf;
    private final long address; // of buf, for the natives (0 without them)
    private final boolean raw;  // write through U at address
    private int pos;
    private int field;

    Record(Event event) {
        this.event = event;
        this.owner = Thread.currentThread();
        this.types = event.types;
        ByteBuffer b = Event.NATIVE ? Event.buffer0(SIZE) : null;
        this.buf = (b != null ? b : ByteBuffer.allocateDirect(SIZE)).order(ByteOrder.nativeOrder());
        this.address = b != null ? Event.address0(b) : 0;
        this.raw = U != null && address != 0;
    }

    void reset() {
        pos = 0;
        field = 0;
    }

    private void expect(Event.Type t) {
        if (field >= types.length || types[field] != t)
            throw new IllegalStateException(event + ": field " + field + " is not " + t);
        field++;
    }

    private void put8(long v) {
        if (raw)
            U.putLong(address + pos, v);
        else
            buf.putLong(pos, v);
        pos += 8;
    }

    private void put4(int v) {
        if (raw)
            U.putInt(address + pos, v);
        else
            buf.putInt(pos, v);
        pos += 4;
    }

    private void put1(int at, int v) {
        if (raw)
            U.putByte(address + at, (byte) v);
        else
            buf.put(at, (byte) v);
    }

    public Record putInt(int v) {
        expect(Event.Type.INT);
        put4(v);
        return this;
    }

    public Record putLong(long v) {
        expect(Event.Type.LONG);
        put8(v);
        return this;
    }

    public Record putBoolean(boolean v) {
        expect(Event.Type.BOOLEAN);
        put1(pos++, v ? 1 : 0);
        return this;
    }

    public Record putDouble(double v) {
        expect(Event.Type.DOUBLE);
        put8(Double.doubleToRawLongBits(v));
        return this;
    }

    public Record putString(String s) {
        expect(Event.Type.STRING);
        if (s == null)
            s = "(null)";
        int from = pos;
        int room = SIZE - from - 1 - 8 * (types.length - field); // see "Room" above
        int len = s.length();
        int lim = Math.min(len, room);
        int n = 0;
        char c = 0x80;
        for (; n < lim; n++) {
            c = s.charAt(n);
            if (c >= 0x80 || c == 0)
                break;
            put1(from + n, c);
        }
        if (n < lim && c != 0) { // the rare non-ASCII string: encode the rest at once
            byte[] rest = s.substring(n).getBytes(java.nio.charset.StandardCharsets.UTF_8);
            int k = Math.min(rest.length, room - n);
            while (k > 0 && k < rest.length && (rest[k] & 0xC0) == 0x80)
                k--; // do not cut a character
            for (int i = 0; i < k && rest[i] != 0; i++, n++)
                put1(from + n, rest[i]);
        }
        put1(from + n, 0);
        pos = from + n + 1;
        return this;
    }

    /** Records the event (if a session still enables it); every field must be set. */
    public void emit() {
        if (field != types.length)
            throw new IllegalStateException(event + ": " + field + " of " + types.length + " fields set");
        if (address != 0)
            Event.emit0(event.handle, address, pos);
    }
}
