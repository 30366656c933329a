import { ApiError } from "../../lib/errors";
import type { Registry } from "../../3-engines/registry";
import type { ResidencyStatus } from "../../3-engines/residency";

// The models' residency (which are loaded, where, how much memory, idle for how long, requests in
// flight) and an admin's load or unload of one: one implementation behind the admin API
// (/api/v1/admin/models, src/1-api/admin/models.ts), the control socket `appliance ps` talks to
// (src/1-api/control-socket.ts) and the console's Models page.

export type ModelsRegistry = Pick<Registry, "status" | "adminLoad" | "adminUnload">;
export type UnloadResult = Awaited<ReturnType<Registry["adminUnload"]>>;

export interface ModelsList {
  object: "list";
  data: ResidencyStatus[];
}

export function modelControl(registry: ModelsRegistry) {
  const control = {
    list: (): ModelsList => ({ object: "list", data: registry.status() }),
    /** Loads `id` where the planner places it; 404 for an unknown id, 503 with the planner's reason when it cannot fit. */
    load: (id: string): Promise<ResidencyStatus> => registry.adminLoad(id),
    /** Unloads `id` now when idle, else once the requests holding it end ("when_idle"). */
    async unload(id: string): Promise<{ id: string; result: UnloadResult }> {
      return { id, result: await registry.adminUnload(id) };
    },
    /**
     * `POST …/models/{id}/load` or `…/unload`, given the decoded path after `models/`. Ids may
     * contain "/" (`org/name`), so the action is the last segment and the id everything before it.
     */
    act(path: string): Promise<ResidencyStatus | { id: string; result: UnloadResult }> {
      const cut = path.lastIndexOf("/");
      const id = path.slice(0, Math.max(cut, 0));
      const action = path.slice(cut + 1);
      if (!id || (action !== "load" && action !== "unload"))
        throw new ApiError("not_found", `expected models/{id}/load or models/{id}/unload, not models/${path.slice(0, 200)}`);
      return action === "load" ? control.load(id) : control.unload(id);
    },
  };
  return control;
}

export type ModelControl = ReturnType<typeof modelControl>;
