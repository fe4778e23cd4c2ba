/*
 * java_api.cpp - the natives of the Java API (java/strata/Event.java,
 * Record.java) in libstrata-jvm.so.  A Java event is a runtime-declared
 * event (include/strata/dynamic.h); Java reads its state word through a
 * direct ByteBuffer (no JNI), and an emit is one JNI call that hands the
 * record buffer Record.java filled (the event's payload, laid out as the
 * trace stores it: described there) to strata_dyn_emit_packed.
 *
 * Concurrency: declare0 may run on any thread (strata_dyn_declare is
 * thread-safe); a Decl is immutable once returned, and never freed (like a
 * released dynamic event's memory, docs/design.md).  emit0 reads only its
 * thread's own record buffer.
 */
#include <jni.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include <strata/dynamic.h>

namespace {

enum JType { kInt, kLong, kDouble, kBoolean, kString, kNumTypes }; // Event.Type order

struct Decl {
	strata_dyn_event *ev;
};

constexpr uint32_t kMaxFields = 16;
constexpr jint kRecordSize = 16384; // Record.SIZE

} // namespace

extern "C" {

JNIEXPORT jboolean JNICALL Java_strata_Event_available0(JNIEnv *, jclass)
{
	return JNI_TRUE;
}

JNIEXPORT jstring JNICALL Java_strata_Event_strerror0(JNIEnv *jni, jclass, jint err)
{
	return jni->NewStringUTF(strata_dyn_strerror(err));
}

JNIEXPORT jlong JNICALL Java_strata_Event_declare0(JNIEnv *jni, jclass, jstring provider, jstring name,
						   jint loglevel, jobjectArray names, jintArray kinds)
{
	if (!provider || !name || !names || !kinds)
		return -EINVAL;
	jsize n = jni->GetArrayLength(names);
	if (n < 0 || uint32_t(n) > kMaxFields || jni->GetArrayLength(kinds) != n)
		return -E2BIG;
	jint k[kMaxFields];
	jni->GetIntArrayRegion(kinds, 0, n, k);
	strata_dyn_field f[kMaxFields];
	const char *fname[kMaxFields] = {};
	jstring fstr[kMaxFields] = {};
	Decl *d = static_cast<Decl *>(calloc(1, sizeof(Decl)));
	long rc = d ? 0 : -ENOMEM;
	for (jsize i = 0; rc == 0 && i < n; i++) {
		fstr[i] = static_cast<jstring>(jni->GetObjectArrayElement(names, i));
		fname[i] = fstr[i] ? jni->GetStringUTFChars(fstr[i], nullptr) : nullptr;
		if (!fname[i] || k[i] < 0 || k[i] >= kNumTypes) {
			rc = -EINVAL;
			break;
		}
		f[i] = {fname[i], STRATA_FIELD_INTEGER, 8, 1, 10, 0};
		if (k[i] == kInt)
			f[i].size = 4;
		else if (k[i] == kBoolean)
			f[i].size = 1, f[i].is_signed = 0;
		else if (k[i] == kDouble)
			f[i].kind = STRATA_FIELD_FLOAT;
		else if (k[i] == kString)
			f[i].kind = STRATA_FIELD_STRING, f[i].size = 0;
	}
	const char *p = jni->GetStringUTFChars(provider, nullptr);
	const char *e = jni->GetStringUTFChars(name, nullptr);
	if (rc == 0 && p && e) {
		rc = strata_dyn_declare(p, e, loglevel, f, uint32_t(n), &d->ev);
	} else if (rc == 0) {
		rc = -ENOMEM;
	}
	if (p)
		jni->ReleaseStringUTFChars(provider, p);
	if (e)
		jni->ReleaseStringUTFChars(name, e);
	for (jsize i = 0; i < n; i++) {
		if (fname[i])
			jni->ReleaseStringUTFChars(fstr[i], fname[i]);
		if (fstr[i])
			jni->DeleteLocalRef(fstr[i]);
	}
	if (rc < 0) {
		free(d);
		return rc;
	}
	return jlong(reinterpret_cast<uintptr_t>(d));
}

JNIEXPORT jobject JNICALL Java_strata_Event_state0(JNIEnv *jni, jclass, jlong h)
{
	Decl *d = reinterpret_cast<Decl *>(uintptr_t(h));
	return jni->NewDirectByteBuffer(&d->ev->state, sizeof d->ev->state);
}

// The state word's address, for Event.java's Unsafe read.
JNIEXPORT jlong JNICALL Java_strata_Event_stateAddress0(JNIEnv *, jclass, jlong h)
{
	Decl *d = reinterpret_cast<Decl *>(uintptr_t(h));
	return jlong(reinterpret_cast<uintptr_t>(&d->ev->state));
}

// A record buffer in native memory (never freed: one per thread and event).
JNIEXPORT jobject JNICALL Java_strata_Event_buffer0(JNIEnv *jni, jclass, jint size)
{
	void *p = size > 0 ? aligned_alloc(64, (size_t(size) + 63) & ~size_t(63)) : nullptr;
	return p ? jni->NewDirectByteBuffer(p, size) : nullptr;
}

// Where a record buffer lives, asked once per Record (GetDirectBufferAddress
// type-checks its argument: too slow for each emit).
JNIEXPORT jlong JNICALL Java_strata_Event_address0(JNIEnv *jni, jclass, jobject buf)
{
	return jni->GetDirectBufferCapacity(buf) >= kRecordSize
		       ? jlong(reinterpret_cast<uintptr_t>(jni->GetDirectBufferAddress(buf)))
		       : 0;
}

// addr: a Record's buffer (address0), len: the bytes Record.java wrote,
// already the record's payload (strata_dyn_emit_packed checks its layout).
JNIEXPORT void JNICALL Java_strata_Event_emit0(JNIEnv *, jclass, jlong h, jlong addr, jint len)
{
	const Decl *d = reinterpret_cast<const Decl *>(uintptr_t(h));
	if (!d || !strata_dyn_enabled(d->ev))
		return;
	const void *b = reinterpret_cast<const void *>(uintptr_t(addr));
	if (!b || len < 0 || len > kRecordSize)
		return;
	strata_dyn_emit_packed(d->ev, b, size_t(len));
}

} // extern "C"
