// Test setup only (LD_PRELOAD into a server or test process that admits Mesa's llvmpipe as its Vulkan
// device; lavapipe.ts builds it). The product never runs on llvmpipe.
//
// Mesa 22.3's lavapipe (Debian 12's) reads every descriptor of a descriptor set when the set is
// bound, and takes a reference on the buffer each one names, whether or not the pipeline uses
// that binding. Vulkan only asks descriptors the bound pipeline uses to be valid, and ggml's
// Vulkan backend relies on that: all its pipelines share one 12-binding layout, its descriptor
// sets are reused from one graph to the next, and a dispatch writes only the bindings it uses.
// When llama.cpp frees a buffer — the compute buffers on every llama_set_causal_attn change (an
// image of a non-causal projector such as Gemma 3's toggles it twice), or a scratch buffer ggml
// outgrows — a reused set can still name it, and binding that set makes lavapipe touch freed
// memory: "malloc(): unsorted double linked list corrupted", "double free or corruption", or a
// segfault in lavapipe's queue thread (valgrind: invalid reads and an invalid free of the freed
// llvmpipe resource). Newer lavapipe binds a set without reading its descriptors.
//
// This library widens each storage-buffer descriptor write that starts at binding 0 to all 12
// bindings (ggml's MAX_PARAMETER_COUNT in node-llama-cpp 3.22.1's llama.cpp), the extra ones naming
// the write's first buffer, so no binding keeps a freed buffer. ggml is the only Vulkan user in the
// server it is preloaded into; should ggml's layout change, the crash can come back (the test then
// fails, it does not pass by luck). It wraps vkUpdateDescriptorSets where ggml looks Vulkan functions up
// (vkGetInstanceProcAddr, vkGetDeviceProcAddr). No Vulkan headers are needed: the few declarations
// follow vulkan_core.h.

#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

typedef struct VkDevice_T * VkDevice;
typedef struct VkInstance_T * VkInstance;
typedef uint64_t VkDescriptorSet, VkBuffer, VkBufferView, VkDeviceSize;
typedef void (*PFN_vkVoidFunction)(void);

enum { DESCRIPTOR_TYPE_STORAGE_BUFFER = 7, GGML_BINDINGS = 12, MAX_WRITES = 16 };

typedef struct {
    VkBuffer buffer;
    VkDeviceSize offset;
    VkDeviceSize range;
} VkDescriptorBufferInfo;

typedef struct {
    int sType;
    const void * pNext;
    VkDescriptorSet dstSet;
    uint32_t dstBinding;
    uint32_t dstArrayElement;
    uint32_t descriptorCount;
    int descriptorType;
    const void * pImageInfo;
    const VkDescriptorBufferInfo * pBufferInfo;
    const VkBufferView * pTexelBufferView;
} VkWriteDescriptorSet;

typedef void (*PFN_vkUpdateDescriptorSets)(VkDevice, uint32_t, const VkWriteDescriptorSet *, uint32_t, const void *);
typedef PFN_vkVoidFunction (*PFN_vkGetInstanceProcAddr)(VkInstance, const char *);
typedef PFN_vkVoidFunction (*PFN_vkGetDeviceProcAddr)(VkDevice, const char *);

static PFN_vkUpdateDescriptorSets real_update;

static void widened_update(VkDevice device, uint32_t n, const VkWriteDescriptorSet * writes, uint32_t n_copies, const void * copies) {
    if (n > MAX_WRITES) return real_update(device, n, writes, n_copies, copies);
    VkWriteDescriptorSet w[MAX_WRITES];
    VkDescriptorBufferInfo infos[MAX_WRITES][GGML_BINDINGS];
    memcpy(w, writes, n * sizeof *w);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t count = w[i].descriptorCount;
        if (w[i].descriptorType != DESCRIPTOR_TYPE_STORAGE_BUFFER || w[i].dstBinding != 0 || w[i].dstArrayElement != 0 || count == 0 ||
            count >= GGML_BINDINGS || !w[i].pBufferInfo)
            continue;
        memcpy(infos[i], w[i].pBufferInfo, count * sizeof infos[i][0]);
        for (uint32_t b = count; b < GGML_BINDINGS; b++) infos[i][b] = w[i].pBufferInfo[0];
        w[i].descriptorCount = GGML_BINDINGS;
        w[i].pBufferInfo = infos[i];
    }
    real_update(device, n, w, n_copies, copies);
}

static void * loader(void) {
    static void * lib;
    if (!lib) lib = dlopen("libvulkan.so.1", RTLD_NOW);
    return lib;
}

static PFN_vkVoidFunction wrap(const char * name, PFN_vkVoidFunction f);

PFN_vkVoidFunction vkGetDeviceProcAddr(VkDevice device, const char * name) {
    static PFN_vkGetDeviceProcAddr real;
    if (!real) real = (PFN_vkGetDeviceProcAddr) dlsym(loader(), "vkGetDeviceProcAddr");
    return real ? wrap(name, real(device, name)) : NULL;
}

PFN_vkVoidFunction vkGetInstanceProcAddr(VkInstance instance, const char * name) {
    static PFN_vkGetInstanceProcAddr real;
    if (!real) real = (PFN_vkGetInstanceProcAddr) dlsym(loader(), "vkGetInstanceProcAddr");
    return real ? wrap(name, real(instance, name)) : NULL;
}

static PFN_vkVoidFunction wrap(const char * name, PFN_vkVoidFunction f) {
    if (!f) return f;
    if (strcmp(name, "vkGetDeviceProcAddr") == 0) return (PFN_vkVoidFunction) vkGetDeviceProcAddr;
    if (strcmp(name, "vkUpdateDescriptorSets") == 0) {
        real_update = (PFN_vkUpdateDescriptorSets) f;
        return (PFN_vkVoidFunction) widened_update;
    }
    return f;
}
