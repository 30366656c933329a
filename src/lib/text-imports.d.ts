// Files imported as text (`with { type: "text" }`): the store's migrations and the manual's pages.
declare module "*.sql" {
  const text: string;
  export default text;
}
declare module "*.md" {
  const text: string;
  export default text;
}
